"""Pronunciation lexicons (``gateway/text/lexicon.py``) and PLS documents (``gateway/text/pls.py``): matching as PLS
and ElevenLabs say (whole words, case-sensitive unless told, leftmost-longest, first rule wins), linear in the text
whatever the rules; offsets back onto the caller's text; hostile PLS refused as a clear error."""

from __future__ import annotations

import time

import pytest

from engines.timing import word_spans
from gateway.speech.alignment import OnCallerText, WordTime
from gateway.text.lexicon import Lexicon, PhonemeOnlyRuleError, Rule
from gateway.text.pls import PLSError, RuleCaps, read_pls, write_pls

CAPS = RuleCaps(max_rules=100)
TOMATO = "təˈmeɪtoʊ"  # noqa: RUF001 - IPA
TOMAHTO = "təˈmɑːtoʊ"  # noqa: RUF001 - IPA
A_SOUND = "eɪ"  # noqa: RUF001 - IPA


def said(rules: list[Rule], text: str) -> str:
    return Lexicon(rules).respell(text).text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GW ships", "gateway ships"),
        ("GW's GW, GW.", "gateway's gateway, gateway."),
        ("GWx and xGW and GW2", "GWx and xGW and GW2"),  # never inside a word
        ("gw and Gw", "gw and Gw"),  # case-sensitive
        ("", ""),
    ],
)
def test_a_grapheme_is_replaced_where_it_stands_as_a_word(text: str, expected: str) -> None:
    assert said([Rule("GW", alias="gateway")], text) == expected


def test_the_longest_match_wins_then_the_first_rule() -> None:
    rules = [Rule("New", alias="Neu"), Rule("New York", alias="NYC"), Rule("New York", alias="ignored")]
    assert said(rules, "New York and New Yorker, New") == "NYC and Neu Yorker, Neu"


def test_rules_may_match_any_case_or_inside_words() -> None:
    assert said([Rule("tts", alias="T T S", case_sensitive=False)], "TTS, Tts and tts") == "T T S, T T S and T T S"
    assert said([Rule("ph", alias="f", word_boundaries=False)], "graph phone") == "graf fone"


def test_a_phoneme_only_rule_is_refused_only_where_it_matches() -> None:
    lexicon = Lexicon([Rule("tomato", phoneme=TOMATO, alphabet="ipa")])
    assert lexicon.respell("potato").text == "potato"
    with pytest.raises(PhonemeOnlyRuleError, match="tomato"):
        lexicon.respell("a tomato")
    carried = Lexicon([Rule("tomato", alias="tomahto", phoneme=TOMAHTO, alphabet="ipa")])
    assert carried.respell("a tomato").text == "a tomahto"  # the alias it carries is spoken


def test_matching_stays_linear_with_hostile_rules() -> None:
    """Graphemes that are all prefixes and suffixes of each other over a text of one letter: a naive scan is
    quadratic (and a regex alternation can be worse); this one reads each character once."""
    rules = [Rule("a" * n, alias="b") for n in range(1, 257)] + [Rule("a" * 300 + "c", alias="d")]
    lexicon = Lexicon(rules)
    started = time.perf_counter()
    out = lexicon.respell("a" * 4096)
    assert time.perf_counter() - started < 0.5
    assert out.text == "a" * 4096  # no word boundary inside the run: nothing replaced
    spaced = lexicon.respell(" ".join(["a" * 256] * 16))
    assert spaced.text == " ".join(["b"] * 16)


def test_spans_of_the_spoken_text_map_back_to_the_callers() -> None:
    respelled = Lexicon([Rule("GW", alias="the gateway")]).respell("Use GW now")
    assert respelled.text == "Use the gateway now"
    assert respelled.original_span(0, 3) == (0, 3)  # Use
    assert respelled.original_span(4, 7) == (4, 6)  # "the" is part of GW
    assert respelled.original_span(8, 15) == (4, 6)  # so is "gateway"
    assert respelled.original_span(16, 19) == (7, 10)  # now


def test_words_heard_on_the_spoken_text_become_the_callers_words() -> None:
    text = "Hi New York and WWW"
    respelled = Lexicon([Rule("New York", alias="NYC"), Rule("WWW", alias="world wide web")]).respell(text)
    spoken = word_spans(respelled.text)  # Hi NYC and world wide web
    heard = [WordTime(start, end, float(i), i + 0.5) for i, (start, end) in enumerate(spoken)]
    caller = OnCallerText(respelled, text)
    words = [*caller.words(heard[:4]), *caller.words(heard[4:]), *caller.finish()]
    assert [(w.char_start, w.char_end) for w in words] == word_spans(text)
    new, york = words[1], words[2]
    assert (new.start_s, york.end_s) == (1.0, 1.5)  # "NYC" is shared between "New" and "York"
    assert (words[4].start_s, words[4].end_s) == (3.0, 5.5)  # "world wide web" is "WWW"


def test_pls_round_trips_and_keeps_both_pronunciations() -> None:
    rules = [
        Rule("GW", alias="gateway"),
        Rule("tomato", phoneme=TOMATO, alphabet="ipa"),
        Rule("A&B <x>", alias="A and B", phoneme=A_SOUND, alphabet="ipa"),
    ]
    assert read_pls(write_pls(rules), CAPS) == rules


def test_a_lexeme_with_several_graphemes_gives_a_rule_each() -> None:
    document = (
        b'<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa" '
        b'xml:lang="en"><lexeme><grapheme>colour</grapheme><grapheme>color</grapheme><alias>kolor</alias></lexeme>'
        b"<unknown/></lexicon>"
    )
    assert [(r.grapheme, r.alias) for r in read_pls(document, CAPS)] == [("colour", "kolor"), ("color", "kolor")]


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (b"<lexicon", "line 1, column"),
        (b'<!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]><x>&b;</x>', "DTD"),
        (b'<!DOCTYPE x SYSTEM "file:///etc/passwd"><x/>', "DTD"),
        (b"<lexicon/>", "namespace"),
        (
            b'<lexicon xmlns="http://www.w3.org/2005/01/pronunciation-lexicon"><lexeme><alias>x</alias></lexeme>'
            b"</lexicon>",
            "no <grapheme>",
        ),
        (
            b'<lexicon xmlns="http://www.w3.org/2005/01/pronunciation-lexicon"><lexeme><grapheme>x</grapheme>'
            b'<phoneme alphabet="x-sampa">x</phoneme></lexeme></lexicon>',
            "alphabet",
        ),
    ],
)
def test_hostile_or_malformed_pls_is_refused_with_a_reason(document: bytes, reason: str) -> None:
    with pytest.raises(PLSError, match=reason):
        read_pls(document, CAPS)


def test_pls_over_the_caps_is_refused() -> None:
    many = write_pls([Rule(f"w{i}", alias="x") for i in range(CAPS.max_rules + 1)])
    with pytest.raises(PLSError, match="more than 100 rules"):
        read_pls(many, CAPS)
    with pytest.raises(PLSError, match="grapheme"):
        read_pls(write_pls([Rule("x" * 300, alias="y")]), CAPS)
    # Refused as they are read, never built into a tree: a file's elements are bounded by its rules.
    lexicon = b'<lexicon xmlns="http://www.w3.org/2005/01/pronunciation-lexicon">'
    with pytest.raises(PLSError, match="nested deeper than 8"):
        read_pls(lexicon + b"<a>" * 50_000 + b"</a>" * 50_000 + b"</lexicon>", CAPS)
    with pytest.raises(PLSError, match=f"more than {16 * CAPS.max_rules + 64} elements"):
        read_pls(lexicon + b"<x/>" * 260_000 + b"</lexicon>", CAPS)
    nested = lexicon + b"<lexeme><grapheme>GW</grapheme><alias>gateway</alias><meta><a><b>x</b></a></meta></lexeme>"
    assert read_pls(nested + b"</lexicon>", CAPS) == [Rule("GW", alias="gateway")]  # what else it holds is ignored
