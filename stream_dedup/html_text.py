"""Readable text out of an HTML page.

Crawled pages carry navigation, scripts, styles, headers and footers around the story. We keep
only the text a reader would read: everything inside ``script``, ``style``, ``nav``, ``header``,
``footer``, ``aside``, ``form``, ``noscript``, ``template``, ``svg``, ``iframe``, ``button`` and
``head`` is dropped, block elements end a line, and when the page has ``<article>`` or
``<main>`` elements only their text is kept (the story is there; the rest is chrome).

Parsed by lxml (libxml2's tolerant HTML parser, ten times faster than the standard library's
``html.parser``) and walked once. Markup lxml cannot take (an empty document, an encoding
declaration in a ``str``, nesting deeper than libxml2's limit of 256) falls back to the ``html.parser`` walker, and anything that one rejects
to a regex tag stripper: bad markup never raises.
"""

from __future__ import annotations

import html as _html
import re
from html.parser import HTMLParser

from lxml import etree

_SKIP = frozenset({"script", "style", "nav", "header", "footer", "aside", "form", "noscript",
                   "template", "svg", "iframe", "button", "head", "select", "object"})
_CONTENT = frozenset({"article", "main"})
_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
                   "param", "source", "track", "wbr"})
_BLOCK = frozenset({"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "section",
                    "article", "main", "blockquote", "pre", "ul", "ol", "table", "dd", "dt", "hr"})


class _Extractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.skip_depth = 0
        self.content_depth = 0
        self.all_parts: list[str] = []
        self.content_parts: list[str] = []
        self.saw_content = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in _VOID:
            if tag in _BLOCK:
                self._emit("\n")
            return
        if tag in _SKIP:
            self.skip_depth += 1
        elif tag in _CONTENT:
            self.content_depth += 1
            self.saw_content = True
        if tag in _BLOCK:
            self._emit("\n")

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        if tag in _BLOCK:
            self._emit("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self.skip_depth = max(0, self.skip_depth - 1)
        elif tag in _CONTENT:
            self.content_depth = max(0, self.content_depth - 1)
        if tag in _BLOCK:
            self._emit("\n")

    def handle_data(self, data: str) -> None:
        if not self.skip_depth:
            self._emit(data)

    def _emit(self, text: str) -> None:
        if self.skip_depth:
            return
        self.all_parts.append(text)
        if self.content_depth:
            self.content_parts.append(text)


_SKIP_BLOCKS = re.compile(r"<(script|style|nav|header|footer|aside|form|noscript|template|svg|iframe|head)\b"
                          r".*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_BLOCK_TAG = re.compile(r"</?(?:p|div|br|li|h[1-6]|tr|section|article|main|blockquote|pre|ul|ol|table)\b[^>]*>",
                        re.IGNORECASE)


def _strip_tags(html: str) -> str:
    """Fallback for markup the standard parser gives up on: drop skipped blocks and tags."""
    text = _SKIP_BLOCKS.sub(" ", html)
    text = _BLOCK_TAG.sub("\n", text)
    return _html.unescape(_TAG.sub(" ", text))


def _readable(all_parts: list[str], content_parts: list[str], saw_content: bool) -> str:
    """The text of the ``<article>``/``<main>`` elements when they hold any, else the whole page's."""
    content = "".join(content_parts)
    return content if saw_content and content.strip() else "".join(all_parts)


def _collapse(text: str) -> str:
    lines = (" ".join(line.split()) for line in text.split("\n"))
    return "\n".join(line for line in lines if line)


_LXML_PARSER = etree.HTMLParser(remove_comments=True, remove_pis=True, no_network=True, recover=True,
                                default_doctype=False)


def _lxml_text(html: str) -> str | None:
    """The same walk as :class:`_Extractor` over lxml's tree; None if lxml cannot parse ``html``."""
    try:
        root = etree.fromstring(html, _LXML_PARSER)
    except (etree.ParserError, etree.XMLSyntaxError, ValueError):
        return None
    if root is None or any(e.level >= etree.ErrorLevels.FATAL for e in _LXML_PARSER.error_log):
        return None  # e.g. nesting deeper than libxml2's limit: parsing stopped early
    all_parts: list[str] = []
    content_parts: list[str] = []
    content_depth = 0
    saw_content = False
    walker = etree.iterwalk(root, events=("start", "end"))
    for event, el in walker:
        tag = el.tag
        if not isinstance(tag, str):  # an entity or other non-element node: its tail is text
            continue
        if event == "start":
            if tag in _SKIP:
                walker.skip_subtree()
                continue
            if tag in _CONTENT:
                content_depth += 1
                saw_content = True
            parts = ["\n", el.text] if tag in _BLOCK else [el.text]
        else:
            if tag in _CONTENT:
                content_depth -= 1
            parts = ["\n", el.tail] if tag in _BLOCK else [el.tail]  # (skip tags are never blocks)
        for text in parts:
            if text:
                all_parts.append(text)
                if content_depth:
                    content_parts.append(text)
    return _readable(all_parts, content_parts, saw_content)


def html_to_text(html: str) -> str:
    """The readable text of ``html`` (see module docstring); whitespace is collapsed per line.

    Never raises: markup that lxml cannot parse goes through the standard parser, and markup that
    one rejects through a regex tag stripper.
    """
    text = _lxml_text(html)
    if text is not None:
        return _collapse(text)
    parser = _Extractor()
    try:
        parser.feed(html)
        parser.close()
    except (AssertionError, ValueError, IndexError):
        return _collapse(_strip_tags(html))
    return _collapse(_readable(parser.all_parts, parser.content_parts, parser.saw_content))
