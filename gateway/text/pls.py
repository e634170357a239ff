"""W3C Pronunciation Lexicon Specification (PLS 1.0) documents: read into :class:`~gateway.text.lexicon.Rule`, and
written back.

Untrusted XML is read with defusedxml (no DTD, no entity, no external reference) within caps on its size, its
lexemes and the length of every field, and only the lexicon's own elements are looked at (``lexicon`` → ``lexeme``
→ ``grapheme``/``phoneme``/``alias``, whatever else is ignored), so that nothing in a document costs more than its
bytes. A lexeme with several graphemes gives a rule for each; one with both an alias and a phoneme keeps both (the
alias is what engines that cannot say phonemes speak). PLS has no notion of case-insensitive or partial-word rules:
what it reads is case-sensitive and word-bounded, and rules that are not are written as if they were.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING
from xml.etree.ElementTree import ParseError
from xml.sax.saxutils import escape, quoteattr

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import iterparse

from gateway.text.lexicon import Rule

if TYPE_CHECKING:
    from collections.abc import Iterable
    from xml.etree.ElementTree import Element

__all__ = ["ALPHABETS", "PLSError", "RuleCaps", "read_pls", "write_pls"]

NAMESPACE = "http://www.w3.org/2005/01/pronunciation-lexicon"
MAX_DEPTH = 8
"""How deep a document's elements may nest: a lexicon's own go three deep (``lexicon/lexeme/grapheme``)."""
ELEMENTS_PER_RULE = 16
"""Elements a document may have for each rule ``caps.max_rules`` allows (a lexeme, its graphemes, a phoneme, an
alias, an example, metadata): a file of a million empty elements is refused as it is read, not built into a tree."""
ALPHABETS = ("ipa", "cmu-arpabet")
"""The phoneme alphabets ElevenLabs' dictionaries take (``x-`` alphabets of PLS are refused)."""


@dataclass(frozen=True, slots=True)
class RuleCaps:
    """How large a set of rules may be."""

    max_rules: int
    max_grapheme_chars: int = 256
    max_replacement_chars: int = 1024
    """The longest alias or phoneme string."""
    max_grapheme_chars_total: int = 65_536
    """The characters of all of a version's graphemes together: what compiling it costs (an automaton state each; 64 Ki
    compile in about 0.07 s and take some 10 MB), whatever ``max_rules`` an operator allows."""


class PLSError(ValueError):
    """A document that is not a PLS lexicon this gateway can read (the message says where and why)."""


def read_pls(document: bytes, caps: RuleCaps) -> list[Rule]:
    """The rules of a PLS document, in document order.

    Raises:
        PLSError: not well-formed XML (with the line and column), a DTD or entity, not a PLS ``lexicon``, a lexeme
            without a grapheme or a pronunciation, an unknown alphabet, or over ``caps``.
    """
    root = _parse(document, max_elements=ELEMENTS_PER_RULE * caps.max_rules + 64)
    if root.tag != f"{{{NAMESPACE}}}lexicon":
        raise PLSError(f"the root element must be <lexicon> in the namespace {NAMESPACE}")
    default_alphabet = root.get("alphabet", "ipa")
    rules: list[Rule] = []
    for number, lexeme in enumerate(root.iterfind(f"{{{NAMESPACE}}}lexeme"), start=1):
        rules += _rules_of(lexeme, number, default_alphabet)
        if len(rules) > caps.max_rules:
            raise PLSError(f"the lexicon has more than {caps.max_rules} rules (grapheme and lexeme pairs)")
    check_rules(rules, caps)
    return rules


def check_rules(rules: Iterable[Rule], caps: RuleCaps) -> None:
    """Check rules, however they came, against ``caps`` and the alphabets.

    Raises:
        PLSError: an empty or overlong field, an unknown alphabet, more than ``caps.max_rules`` rules, or graphemes
            of more than ``caps.max_grapheme_chars_total`` characters in all.
    """
    count = total = 0
    for rule in rules:
        count += 1
        total += len(rule.grapheme)
        if not rule.grapheme.strip() or len(rule.grapheme) > caps.max_grapheme_chars:
            raise PLSError(f"a grapheme must have 1 to {caps.max_grapheme_chars} characters: {rule.grapheme[:40]!r}")
        for value in (rule.alias, rule.phoneme):
            if value is not None and len(value) > caps.max_replacement_chars:
                raise PLSError(f"an alias or phoneme has more than {caps.max_replacement_chars} characters")
        if rule.phoneme is not None and rule.alphabet not in ALPHABETS:
            raise PLSError(f"unknown phoneme alphabet {rule.alphabet!r}; one of: {', '.join(ALPHABETS)}")
        if rule.alias is None and not rule.phoneme:
            raise PLSError(f"the rule for {rule.grapheme[:40]!r} has neither an alias nor a phoneme")
    if count > caps.max_rules:
        raise PLSError(f"more than {caps.max_rules} rules in one dictionary")
    if total > caps.max_grapheme_chars_total:
        raise PLSError(f"the graphemes have more than {caps.max_grapheme_chars_total} characters in all")


def write_pls(rules: Iterable[Rule], *, language: str = "en-US") -> bytes:
    """A PLS 1.0 document of ``rules`` (a lexeme each)."""
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<lexicon version="1.0" xmlns="{NAMESPACE}" alphabet="ipa" xml:lang={quoteattr(language)}>',
    ]
    for rule in rules:
        parts = [f"<grapheme>{escape(rule.grapheme)}</grapheme>"]
        if rule.phoneme is not None:
            alphabet = f" alphabet={quoteattr(rule.alphabet)}" if rule.alphabet and rule.alphabet != "ipa" else ""
            parts.append(f"<phoneme{alphabet}>{escape(rule.phoneme)}</phoneme>")
        if rule.alias is not None:
            parts.append(f"<alias>{escape(rule.alias)}</alias>")
        lines.append(f"  <lexeme>{''.join(parts)}</lexeme>")
    lines.append("</lexicon>")
    return ("\n".join(lines) + "\n").encode()


def _parse(document: bytes, *, max_elements: int) -> Element:
    """The document's root, read within :data:`MAX_DEPTH` and ``max_elements``."""
    root: Element | None = None
    depth = elements = 0
    try:
        for event, element in iterparse(io.BytesIO(document), events=("start", "end"), forbid_dtd=True):
            if event == "end":
                depth -= 1
                continue
            root, depth, elements = root if root is not None else element, depth + 1, elements + 1
            if depth > MAX_DEPTH:
                raise PLSError(f"elements nested deeper than {MAX_DEPTH}")
            if elements > max_elements:
                raise PLSError(f"more than {max_elements} elements")
    except ParseError as exc:
        line, column = exc.position
        raise PLSError(f"not well-formed XML at line {line}, column {column + 1}") from None
    except DefusedXmlException as exc:
        raise PLSError(f"refused: {type(exc).__name__} (no DTDs, entities or external references)") from None
    if root is None:  # pragma: no cover - iterparse raises on a document without an element
        raise PLSError("not well-formed XML: no element")
    return root


def _rules_of(lexeme: Element, number: int, default_alphabet: str) -> list[Rule]:
    graphemes = [element.text or "" for element in lexeme.iterfind(f"{{{NAMESPACE}}}grapheme")]
    phoneme = lexeme.find(f"{{{NAMESPACE}}}phoneme")
    alias = lexeme.find(f"{{{NAMESPACE}}}alias")
    if not graphemes:
        raise PLSError(f"lexeme {number} has no <grapheme>")
    if phoneme is None and alias is None:
        raise PLSError(f"lexeme {number} has neither a <phoneme> nor an <alias>")
    return [
        Rule(
            grapheme=grapheme.strip(),
            alias=(alias.text or "").strip() if alias is not None else None,
            phoneme=(phoneme.text or "").strip() if phoneme is not None else None,
            alphabet=phoneme.get("alphabet", default_alphabet) if phoneme is not None else None,
        )
        for grapheme in graphemes
    ]
