"""Drop exact duplicates of inline scripts from every page.

Under Jupyter Book 1, sphinx-thebe and sphinx-togglebutton register their inline configuration scripts twice
(once with filename ``None``, once with ``""``, so Sphinx does not see them as equal). A second ``const THEBE_JS_URL = …`` is a SyntaxError
in the browser, which the browser test (scripts/browser_test.py) reports as a console error.
"""


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {})
        key = (getattr(script, "filename", script) or "", tuple(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
