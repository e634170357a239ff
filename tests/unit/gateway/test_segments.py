"""Cutting a whole input into segments (``gateway/speech/segments.py``): nothing lost, cuts where speech pauses, the
limit respected."""

from __future__ import annotations

import random
import re

import pytest

from gateway.speech.segments import split_text


def rejoins(text: str, segments: list[str]) -> bool:
    """Whether ``segments`` are ``text`` in order with only whitespace between them: nothing lost, nothing moved."""
    return re.fullmatch(r"\s*".join(map(re.escape, segments)), text) is not None


def test_a_text_within_the_limit_is_one_segment_as_it_is() -> None:
    text = "Short. Two sentences, one job."
    assert split_text(text, len(text)) == [text]


def test_segments_hold_as_many_whole_sentences_as_fit() -> None:
    sentences = [f"Sentence number {n} is here." for n in range(6)]  # 27 characters each
    text = " ".join(sentences)

    segments = split_text(text, 60)

    assert segments == [" ".join(sentences[n : n + 2]) for n in range(0, 6, 2)]


def test_abbreviations_initials_and_decimals_end_no_segment() -> None:
    text = "Dr. Smith and J. Doe paid 3.5 dollars each. Then they left."
    assert split_text(text, 50) == ["Dr. Smith and J. Doe paid 3.5 dollars each.", "Then they left."]


def test_sentence_ends_count_with_their_closing_quotes_newlines_and_other_scripts() -> None:
    text = 'He said "stop!" and left.\n\nA new paragraph follows here? Yes (it does.) Done'
    segments = split_text(text, 30)
    assert segments == ['He said "stop!" and left.', "A new paragraph follows here?", "Yes (it does.) Done"]


def test_a_sentence_longer_than_the_limit_is_cut_after_its_last_clause_within_it() -> None:
    text = "One two three, four five six; seven eight nine ten eleven twelve."
    assert split_text(text, 32) == ["One two three, four five six;", "seven eight nine ten eleven", "twelve."]


def test_without_clauses_a_sentence_is_cut_between_words() -> None:
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda"
    segments = split_text(words, 20)
    assert all(len(segment) <= 20 for segment in segments)
    assert " ".join(segments) == words  # no word was cut


def test_a_word_longer_than_the_limit_is_cut_at_the_limit() -> None:
    text = "short " + "x" * 70 + " end"
    segments = split_text(text, 30)
    assert segments == ["short", "x" * 30, "x" * 30, "x" * 10 + " end"]


def test_cjk_is_cut_after_its_full_stops_then_its_commas_then_anywhere_without_spaces() -> None:
    sentences = "今天天气很好。我们去公园散步吧！你觉得怎么样？"  # noqa: RUF001 - 7, 9 and 7 characters
    clauses = "我们先去超市买东西，然后回家做饭，最后一起看电影"  # noqa: RUF001 - no full stop: commas only
    unbroken = "汉" * 45

    assert split_text(sentences, 15) == ["今天天气很好。", "我们去公园散步吧！", "你觉得怎么样？"]  # noqa: RUF001
    assert split_text(clauses, 20) == ["我们先去超市买东西，然后回家做饭，", "最后一起看电影"]  # noqa: RUF001
    assert split_text(unbroken, 20) == ["汉" * 20, "汉" * 20, "汉" * 5]


def test_a_piece_with_nothing_to_say_joins_its_neighbour_where_the_two_fit() -> None:
    # Alone, the head "?! ..." would be a job saying nothing.
    text = "?! ... Short, then a clause that is long enough to be cut."
    assert split_text(text, 30) == ["?! ... Short,", "then a clause that is long", "enough to be cut."]
    # Joined, the tail and the head of dashes would make segments over the limit: they stay apart.
    text = "Here is a sentence that fills. ?! ..."
    assert split_text(text, 31) == ["Here is a sentence that fills.", "?! ..."]
    assert split_text("-" * 40 + " " + text, 31) == ["-" * 31, "-" * 9 + " Here is a sentence", "that fills. ?! ..."]


@pytest.mark.parametrize(
    "run",
    ["\U0001f600 " * 60_000, "\U0001f600" * 100_001, "- " * 60_000, "\u2014" * 5000 + " ?!" * 3000],
    ids=["emoji-and-spaces", "emoji", "dashes", "dashes-and-marks"],
)
def test_a_long_run_with_nothing_to_say_is_cut_within_the_limit(run: str) -> None:
    """Joined whole to the sentences before it, 60,000 emoji made one segment of 120,902 characters: a job's
    segment past every bound, which its runner could not even ask the speech service for."""
    text = ("Hello there, friend. " * 100 + run).strip()
    segments = split_text(text, 1200)
    assert max(map(len, segments)) <= 1200
    assert rejoins(text, segments)


_WORDS = ["alpha", "beta", "3.5", "Dr.", "e.g.", "x" * 25, "你好", "世界", "汉字很多", "gamma"]
_MARKS = ["", "", "", ",", ".", "!", "?", ";", "。", "，", "…", '."', ".)", "\n", "\n\n"]  # noqa: RUF001


def random_text(rng: random.Random) -> str:
    parts = [rng.choice(_WORDS) + rng.choice(_MARKS) for _ in range(rng.randint(1, 120))]
    return "".join(part + (" " if rng.random() < 0.8 else "") for part in parts).strip()


@pytest.mark.parametrize("max_chars", [20, 37, 100, 300])
def test_any_text_rejoins_from_its_segments_each_within_the_limit(max_chars: int) -> None:
    rng = random.Random(max_chars)
    for _ in range(300):
        text = random_text(rng)
        segments = split_text(text, max_chars)
        assert rejoins(text, segments), (text, segments)
        assert all(len(segment) <= max_chars for segment in segments), (text, segments)
        assert all(segment == segment.strip() and segment for segment in segments)
