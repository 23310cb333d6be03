"""Bibliography labels in the style of the in-text citations: "[Vaswani et al., 2017]".

The chapters cite with sphinxcontrib-bibtex's ``author_year`` reference style, which reads
"[Vaswani et al., 2017]", while pybtex's default ``alpha`` labels read "[VSP+17]" on the References
page. This registers a pybtex formatting style, ``author_year``, whose labels match the citations
(one author: "Zipf, 1949"; two: "Zhang and Sennrich, 2019"; more: "Ba et al., 2016") and whose
entries are sorted by those labels. The entries keep pybtex's ``unsrt`` formatting, with the link
of each ``url`` field.
"""

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting import BaseSortingStyle


def _label(entry) -> str:
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    # "von Werra", as the citations print it: the particle belongs to the name
    names = [" ".join(person.prelast_names + person.last_names).replace("{", "").replace("}", "")
             for person in people]
    if not names:
        who = entry.fields.get("title", "Anonymous")
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        seen = {}
        for entry in sorted_entries:
            label = _label(entry)
            seen[label] = seen.get(label, 0) + 1
            yield label if seen[label] == 1 else f"{label}{'abcdefghij'[seen[label] - 1]}"


class AuthorYearSorting(BaseSortingStyle):
    def sorting_key(self, entry):
        return _label(entry).lower(), entry.fields.get("title", "").lower()


class AuthorYearStyle(UnsrtStyle):
    default_label_style = AuthorYearLabels
    default_sorting_style = AuthorYearSorting


def setup(app):
    register_plugin("pybtex.style.formatting", "author_year", AuthorYearStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
