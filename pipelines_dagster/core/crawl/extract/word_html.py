"""The HTML mammoth makes of a Word document, as markdown: headings, paragraphs, bold and italics, links, lists
(nested) and tables, the whole of mammoth's vocabulary. mammoth's own markdown escapes every `.`, `(` and `-`
and runs a table's cells together, which the KB would then hold."""

from __future__ import annotations

from lxml import html as lxml_html
from lxml.html import HtmlElement

_HEADINGS = {f"h{level}": "#" * level for level in range(1, 7)}
_BLOCKS = frozenset({"p", "ul", "ol", "li", "table", *_HEADINGS})
_INDENT = "  "


def markdown_of(html: str) -> str:
    """`html` (mammoth's, of one document) as markdown, one blank line between blocks."""
    if not html.strip():
        return ""
    root = lxml_html.fragment_fromstring(html, create_parent="div")
    return "\n\n".join(block for child in root if (block := _block(child)))


def _block(element: HtmlElement, *, depth: int = 0) -> str:
    tag = element.tag
    if tag in _HEADINGS:
        return f"{_HEADINGS[tag]} {_inline(element)}"
    if tag in ("ul", "ol"):
        return _list(element, depth=depth)
    if tag == "table":
        return _table(element)
    return _inline(element)


def _list(element: HtmlElement, *, depth: int) -> str:
    lines = []
    for number, item in enumerate(element.iterchildren("li"), start=1):
        marker = f"{number}." if element.tag == "ol" else "-"
        nested = [child for child in item if child.tag in ("ul", "ol")]
        for child in nested:
            item.remove(child)  # keeps its tail text: lxml moves it to the previous sibling
        lines.append(f"{_INDENT * depth}{marker} {_inline(item)}")
        lines += [_list(child, depth=depth + 1) for child in nested]
    return "\n".join(line for line in lines if line.strip())


def _table(element: HtmlElement) -> str:
    rows = [
        [" ".join(_inline(cell).split()).replace("|", "\\|") for cell in row if cell.tag in ("td", "th")]
        for row in element.iter("tr")
    ]
    rows = [row for row in rows if row]
    if not rows:
        return ""
    width = max(map(len, rows))
    lines = [f"| {' | '.join(row + [''] * (width - len(row)))} |" for row in rows]
    return "\n".join([lines[0], f"|{' --- |' * width}", *lines[1:]])


def _inline(element: HtmlElement) -> str:
    """An element's text with its inline markup as markdown; a block inside (a table cell's paragraphs) on a line of
    its own."""
    parts = [element.text or ""]
    for child in element:
        parts += [_inline_child(child), child.tail or ""]
    return "".join(parts).strip()


def _inline_child(child: HtmlElement) -> str:
    tag = child.tag
    if tag == "br":
        return "\n"
    inner = _inline(child)
    if not inner:
        return ""
    if tag == "strong":
        return f"**{inner}**"
    if tag == "em":
        return f"*{inner}*"
    if tag == "a" and (href := child.get("href")) and not href.startswith("#"):
        return f"[{inner}]({href})"
    if tag in _BLOCKS:
        return f"\n{_block(child)}\n"
    return inner
