"""Let the PDF show U+FFFD, the replacement character (Chapter 1b decodes half an emoji).

LuaTeX stops with "String contains an invalid utf-8 sequence" when it reads U+FFFD: it takes
the character for the mark of a broken byte sequence. Sphinx's LaTeX writer escapes text
through the maps of ``sphinx.util.texescape``; this adds U+FFFD to the maps for Unicode
engines as ``\\char"FFFD``, which LuaTeX typesets from the font like any other character.
"""

from sphinx.util import texescape

REPLACEMENT_CHARACTER = r'\char"FFFD\relax{}'


def setup(app):
    for table in (texescape._tex_escape_map_without_unicode,
                  texescape._tex_hlescape_map_without_unicode):
        table[0xFFFD] = REPLACEMENT_CHARACTER
    return {"parallel_read_safe": True, "parallel_write_safe": True}
