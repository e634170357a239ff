"""Pronunciation lexicons: rules that respell words of a text before an engine speaks it.

A rule names a grapheme (the written form) and what to say instead: an ``alias`` (other text) or a ``phoneme``
string in an alphabet (IPA, CMU Arpabet). Matching is as the W3C Pronunciation Lexicon Specification (PLS) and
ElevenLabs' dictionaries say: case-sensitive unless a rule says otherwise, only where the grapheme stands as whole
words (unless the rule says otherwise), leftmost and then longest first, never overlapping; among rules of the same
grapheme the first one wins (the first dictionary named, then the first rule in it).

The scan is linear in the text whatever the rules are: an Aho-Corasick automaton over every grapheme of a dictionary
version (built once per version, which never changes; a lexicon of several versions walks each one's in turn), no
regular expression built from a tenant's input. Written here
because the one maintained implementation (pyahocorasick, a C extension) would add a compiled dependency for some 60
lines, and the word-boundary check must see every match anyway.

:meth:`Lexicon.respell` returns the text to speak and where each replacement sits in both texts
(:class:`Respelled`), so that times reported on the spoken text can be placed on the caller's text.
"""

from __future__ import annotations

import bisect
import unicodedata
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable, MutableSequence, Sequence

__all__ = [
    "CompiledTables",
    "Lexicon",
    "PhonemeOnlyRuleError",
    "Replacement",
    "Respelled",
    "Rule",
    "compiled_tables",
    "is_word_character",
]


_STEP = 512
"""Automaton states built or linked between two yields of a compile in steps (about a millisecond here)."""
_LOAD_STEP = 4096
"""Transitions put back into a dictionary between two yields of :meth:`Lexicon.loading` (well under a millisecond:
C code, no Python per entry)."""

_Tables = tuple["array[int]", "array[int]", "array[int]", "array[int]", "array[int]", "array[int]"]
"""One automaton as flat arrays: transition keys, their targets, and each state's rule, depth, fail and output."""
CompiledTables = dict[tuple[bool, bool], _Tables]
"""A compiled version as arrays by kind of matching (:func:`compiled_tables`): what a compile process sends back.
Arrays pickle as their bytes, so the process that receives them spends a copy on them, not a Python object per
state (a pickled :class:`Lexicon` took as long to load as to compile)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One lexicon entry: ``grapheme`` is said as ``alias``, or pronounced as ``phoneme`` (in ``alphabet``)."""

    grapheme: str
    alias: str | None = None
    phoneme: str | None = None
    alphabet: str | None = None
    case_sensitive: bool = True
    word_boundaries: bool = True

    @property
    def kind(self) -> str:
        """``alias`` or ``phoneme``: what the rule is, as ElevenLabs' API names it (a PLS entry with both is an
        alias rule that also carries a phoneme)."""
        return "alias" if self.alias is not None else "phoneme"


class PhonemeOnlyRuleError(Exception):
    """A rule that only gives a phoneme string matched the text, and the engine cannot say phonemes.

    Attributes:
        grapheme: The matched grapheme.
        alphabet: The rule's alphabet.
    """

    def __init__(self, grapheme: str, alphabet: str | None) -> None:
        super().__init__(
            f"The pronunciation rule for '{grapheme}' gives only a phoneme string ({alphabet or 'ipa'}), which this "
            "engine cannot speak; give the rule an alias."
        )
        self.grapheme = grapheme
        self.alphabet = alphabet


@dataclass(frozen=True, slots=True)
class Replacement:
    """Characters ``[start, end)`` of the caller's text became ``[spoken_start, spoken_end)`` of the spoken text."""

    start: int
    end: int
    spoken_start: int
    spoken_end: int


@dataclass(frozen=True, slots=True)
class Respelled:
    """The text to speak, and where it differs from the caller's."""

    text: str
    replacements: tuple[Replacement, ...] = ()
    _spoken_starts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_spoken_starts", tuple(replaced.spoken_start for replaced in self.replacements))

    def original_span(self, start: int, end: int) -> tuple[int, int]:
        """Characters ``[start, end)`` of the spoken text as characters of the caller's text: a span that touches a
        replacement covers the whole grapheme it replaced."""
        if not self.replacements:
            return start, end
        return self._from_start(start), max(self._from_start(start), self._from_end(end))

    def _from_start(self, point: int) -> int:
        index = bisect.bisect_right(self._spoken_starts, point) - 1
        if index < 0:
            return point
        replaced = self.replacements[index]
        if point < replaced.spoken_end:
            return replaced.start
        return replaced.end + point - replaced.spoken_end

    def _from_end(self, point: int) -> int:
        index = bisect.bisect_left(self._spoken_starts, point) - 1  # the last replacement that starts before it
        if index < 0:
            return point
        replaced = self.replacements[index]
        if point <= replaced.spoken_end:
            return replaced.end
        return replaced.end + point - replaced.spoken_end


def is_word_character(character: str) -> bool:
    """Letters, digits, combining marks and ``_``: what a word-bounded grapheme may not continue into."""
    return character.isalnum() or character == "_" or unicodedata.category(character).startswith("M")


def _starts_a_word(text: str, start: int) -> bool:
    """Whether a match may begin at ``start``: not between two word characters."""
    return start == 0 or not (is_word_character(text[start - 1]) and is_word_character(text[start]))


def _ends_a_word(text: str, end: int) -> bool:
    return end == len(text) or not (is_word_character(text[end - 1]) and is_word_character(text[end]))


def _folded(text: str) -> str:
    """``text`` lower-cased character by character (a character whose lower case is longer stays as it is), so that
    offsets in it are offsets in ``text``."""
    return "".join(lower if len(lower := character.lower()) == 1 else character for character in text)


class _Automaton:
    """Aho-Corasick over a set of patterns: every occurrence of every pattern, in one pass over the text.

    Its transitions are one dictionary keyed by ``state << 21 | code point`` and its other fields lists of integers:
    no container per state, so a compile allocates a few objects rather than one per state, and the collector has
    little to walk. Built by :meth:`building`, a generator that yields every :data:`_STEP` states, so that its caller
    can give an event loop its turns in between (a version's compile is some 0.07 s of pure Python).
    """

    def __init__(self) -> None:
        self._goto: dict[int, int] = {}
        self._rule: MutableSequence[int] = [-1]  # the rule whose pattern ends at this state (the first given), or -1
        self._depth: MutableSequence[int] = [0]
        self._parent: list[int] = [0]
        self._code: list[int] = [0]  # the code point that leads from the parent to this state
        self._by_depth: list[list[int]] = [[0]]  # the states of each depth, while building (the links need them)
        self._fail: MutableSequence[int] = []
        self._output: MutableSequence[int] = []  # the nearest state on the fail chain that ends a pattern (0: none)

    @classmethod
    def building(cls, patterns: Sequence[tuple[str, int]]) -> Generator[None, None, _Automaton]:
        """The automaton of ``patterns``, yielding between steps of about :data:`_STEP` states."""
        automaton = cls()
        inserted = 0
        for pattern, rule in patterns:
            automaton._insert(pattern, rule)
            inserted += len(pattern)
            if inserted >= _STEP:
                inserted = 0
                yield
        yield from automaton._link()
        return automaton

    @property
    def size(self) -> int:
        return len(self._rule)

    def tables(self) -> _Tables:
        """The compiled automaton as arrays (:meth:`loading` takes them back)."""
        return (
            array("q", self._goto.keys()),
            array("q", self._goto.values()),
            *(array("q", values) for values in (self._rule, self._depth, self._fail, self._output)),
        )  # type: ignore[return-value]

    @classmethod
    def loading(cls, tables: _Tables) -> Generator[None, None, _Automaton]:
        """The automaton of :meth:`tables`, its transitions put back :data:`_LOAD_STEP` at a time between yields; the
        other fields stay arrays (read by index as lists are)."""
        keys, targets, rule, depth, fail, output = tables
        automaton = cls()
        automaton._rule, automaton._depth, automaton._fail, automaton._output = rule, depth, fail, output
        automaton._parent, automaton._code, automaton._by_depth = [], [], []
        for start in range(0, len(keys), _LOAD_STEP):
            end = start + _LOAD_STEP
            automaton._goto.update(zip(keys[start:end], targets[start:end], strict=True))
            yield
        return automaton

    def _insert(self, pattern: str, rule: int) -> None:
        node = 0
        goto = self._goto
        for character in pattern:
            code = ord(character)
            following = goto.get(node << 21 | code)
            if following is None:
                following = goto[node << 21 | code] = len(self._rule)
                depth = self._depth[node] + 1
                self._rule.append(-1)
                self._depth.append(depth)
                self._parent.append(node)
                self._code.append(code)
                if depth == len(self._by_depth):
                    self._by_depth.append([])
                self._by_depth[depth].append(following)
            node = following
        if self._rule[node] < 0:
            self._rule[node] = rule

    def _link(self) -> Generator[None, None, None]:
        """Fail and output links, state by state in order of depth (a state's links need its parent's)."""
        goto, fail, rules = self._goto, [0] * self.size, self._rule
        output = [0] * self.size
        linked = 0
        for states in self._by_depth[2:]:  # states of depth 1 fail to the root
            for state in states:
                code = self._code[state]
                fallback = fail[self._parent[state]]
                while fallback and (fallback << 21 | code) not in goto:
                    fallback = fail[fallback]
                target = goto.get(fallback << 21 | code, 0)
                fail[state] = target
                output[state] = target if rules[target] >= 0 else output[target]
                linked += 1
                if linked % _STEP == 0:
                    yield
        self._fail, self._output, self._by_depth = fail, output, []

    def longest(self, scanned: str, text: str, *, bounded: bool) -> Iterable[tuple[int, int, int]]:
        """``(start, end, rule)``: at each end in ``scanned`` (``text`` as matched: itself or folded), the longest
        occurrence; ``bounded``: the longest that neither begins nor ends inside a word of ``text``.

        A shorter occurrence that ends at the same place lies inside the longest one, so leftmost-longest never needs
        it unless an earlier choice overlaps the longest (then it is missed: a rule of such overlapping graphemes
        should be one rule). The walk to a bounded occurrence happens only at word ends and passes only occurrences
        that start inside a word: the scan stays linear in the text for graphemes of bounded length.
        """
        node = 0
        goto, fail, rules, output, depth = self._goto, self._fail, self._rule, self._output, self._depth
        for index, character in enumerate(scanned):
            code = ord(character)
            while node and (node << 21 | code) not in goto:
                node = fail[node]
            node = goto.get(node << 21 | code, 0)
            found = node if rules[node] >= 0 else output[node]
            end = index + 1
            if not found or (bounded and not _ends_a_word(text, end)):
                continue
            while bounded and found and not _starts_a_word(text, end - depth[found]):
                found = output[found]
            if found:
                yield end - depth[found], end, rules[found]


class Lexicon:
    """A set of rules, compiled for matching; immutable, so one instance may serve any number of requests.

    A lexicon of several dictionaries is :meth:`joined` from theirs: it walks each one's automata in turn and compiles
    nothing, so a new combination of compiled versions costs no compile (``gateway/speech/pronunciation.py`` keeps one
    compiled lexicon per dictionary version).
    """

    def __init__(self, rules: Iterable[Rule]) -> None:
        """Compile ``rules`` at once (:meth:`building` compiles in steps)."""
        for _ in self._build(rules):
            pass

    @classmethod
    def building(cls, rules: Iterable[Rule]) -> Generator[None, None, Lexicon]:
        """Compile ``rules`` in steps: yields between steps of a few thousand automaton states (about a millisecond
        each), so that a caller on an event loop can give other requests their turns; returns the lexicon."""
        lexicon = cls.__new__(cls)
        yield from lexicon._build(rules)
        return lexicon

    def _build(self, rules: Iterable[Rule]) -> Generator[None, None, None]:
        self._set_part((yield from _compiled(_kept(rules))))

    def _set_part(self, part: _Part) -> None:
        self._parts: tuple[_Part, ...] = (part,)
        self.rules = part.rules
        self.size = part.size
        """The automata's states: what the compiled lexicon costs in memory (about 150 bytes each)."""

    @classmethod
    def loading(cls, rules: Iterable[Rule], tables: CompiledTables) -> Generator[None, None, Lexicon]:
        """The lexicon of ``rules`` from the :func:`compiled_tables` of the same rules (compiled elsewhere: another
        process), in steps as :meth:`building`."""
        kept = _kept(rules)
        automata: dict[tuple[bool, bool], _Automaton] = {}
        for kind, automaton in tables.items():
            automata[kind] = yield from _Automaton.loading(automaton)
        lexicon = cls.__new__(cls)
        lexicon._set_part(_part(kept, automata))
        return lexicon

    @classmethod
    def joined(cls, lexicons: Sequence[Lexicon]) -> Lexicon:
        """The rules of ``lexicons`` in order (for one grapheme the first lexicon's rule wins), sharing their compiled
        automata: no compile."""
        joined = cls.__new__(cls)
        joined._parts = tuple(part for lexicon in lexicons for part in lexicon._parts)
        joined.rules = tuple(rule for part in joined._parts for rule in part.rules)
        joined.size = sum(part.size for part in joined._parts)
        return joined

    def __bool__(self) -> bool:
        return bool(self.rules)

    def respell(self, text: str) -> Respelled:
        """``text`` with every matching grapheme replaced by its rule's alias.

        Raises:
            PhonemeOnlyRuleError: a rule without an alias matched (no engine here says phoneme strings).
        """
        chosen = self._chosen(text)
        if not chosen:
            return Respelled(text)
        parts: list[str] = []
        replacements: list[Replacement] = []
        position = spoken = 0
        for start, end, index in chosen:
            rule = self.rules[index]
            if rule.alias is None:
                raise PhonemeOnlyRuleError(rule.grapheme, rule.alphabet)
            parts += (text[position:start], rule.alias)
            spoken += start - position
            replacements.append(Replacement(start, end, spoken, spoken + len(rule.alias)))
            spoken += len(rule.alias)
            position = end
        parts.append(text[position:])
        return Respelled("".join(parts), tuple(replacements))

    def _chosen(self, text: str) -> list[tuple[int, int, int]]:
        """The matches to replace: at each start the longest (then the first rule), leftmost first, none
        overlapping."""
        best: dict[int, tuple[int, int]] = {}  # start -> (end, rule)
        folded = _folded(text) if any(part.folds for part in self._parts) else text
        offset = 0  # a rule's index in :attr:`rules`: its part's offset plus its index in the part
        for part in self._parts:
            for (sensitive, bounded), automaton in part.automata.items():
                for start, end, found in automaton.longest(text if sensitive else folded, text, bounded=bounded):
                    index = offset + found
                    held = best.get(start)
                    if held is None or end > held[0] or (end == held[0] and index < held[1]):
                        best[start] = (end, index)
            offset += len(part.rules)
        chosen: list[tuple[int, int, int]] = []
        reached = 0
        for start in sorted(best):
            if start >= reached:
                end, index = best[start]
                chosen.append((start, end, index))
                reached = end
        return chosen


@dataclass(frozen=True, slots=True)
class _Part:
    """The rules of one compile, with one automaton per kind of matching (case, word boundaries) they ask for."""

    rules: tuple[Rule, ...]
    automata: dict[tuple[bool, bool], _Automaton]
    size: int
    folds: bool
    """Some rule matches regardless of case: the text is folded to scan it."""


def _kept(rules: Iterable[Rule]) -> tuple[Rule, ...]:
    """The rules a lexicon matches (an empty grapheme matches nothing)."""
    return tuple(rule for rule in rules if rule.grapheme)


def _compiled(rules: tuple[Rule, ...]) -> Generator[None, None, _Part]:
    kinds: dict[tuple[bool, bool], list[tuple[str, int]]] = {}
    for index, rule in enumerate(rules):
        pattern = rule.grapheme if rule.case_sensitive else _folded(rule.grapheme)
        kinds.setdefault((rule.case_sensitive, rule.word_boundaries), []).append((pattern, index))
    automata: dict[tuple[bool, bool], _Automaton] = {}
    for kind, patterns in kinds.items():
        automata[kind] = yield from _Automaton.building(patterns)
    return _part(rules, automata)


def _part(rules: tuple[Rule, ...], automata: dict[tuple[bool, bool], _Automaton]) -> _Part:
    size = sum(automaton.size for automaton in automata.values())
    return _Part(rules, automata, size, folds=any(not sensitive for sensitive, _ in automata))


def compiled_tables(rules: Sequence[Rule]) -> CompiledTables:
    """Compile ``rules`` at once and return the automata as arrays, for :meth:`Lexicon.loading` (in another process:
    what a compile process runs)."""
    lexicon = Lexicon(rules)
    return {kind: automaton.tables() for kind, automaton in lexicon._parts[0].automata.items()}
