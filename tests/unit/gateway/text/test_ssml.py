"""The SSML reader and the scripts it makes (``gateway/text``): the subset, ``say-as``, ElevenLabs' break tags, and
hostile or malformed input refused fast, with where, within caps."""

from __future__ import annotations

import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.text import IDENTITY, Markup, MarkupError, Script, Silence, Speech, read_script
from gateway.text.script import MAX_PARTS
from gateway.text.ssml import MAX_BREAK_S, MAX_DEPTH, is_ssml, parse_ssml


def spoken(document: str) -> str:
    return parse_ssml(document).text


def test_a_break_is_an_exact_silence_between_the_spans() -> None:
    script = parse_ssml('<speak>One.<break time="1500ms"/>Two.<break time="0.25s"/>Three.</speak>')
    assert script.parts == (Speech("One."), Silence(1.5), Speech("Two."), Silence(0.25), Speech("Three."))


@pytest.mark.parametrize(("strength", "seconds"), [("x-weak", 0.1), ("medium", 0.5), ("x-strong", 1.5)])
def test_a_breaks_strength_is_a_silence_of_its_length(strength: str, seconds: float) -> None:
    assert parse_ssml(f'<speak>a<break strength="{strength}"/>b</speak>').parts[1] == Silence(seconds)


def test_a_break_without_attributes_is_medium_and_one_too_long_is_cut() -> None:
    assert parse_ssml("<speak>a<break/>b</speak>").parts[1] == Silence(0.5)
    assert parse_ssml('<speak>a<break time="60s"/>b</speak>').parts[1] == Silence(MAX_BREAK_S)


def test_sub_says_its_alias_and_emphasis_p_s_lang_phoneme_keep_their_text() -> None:
    document = (
        '<speak xmlns="http://www.w3.org/2001/10/synthesis" xml:lang="en-US"><p><s>The '
        '<sub alias="World Wide Web Consortium">W3C</sub> is <emphasis level="strong">here</emphasis>.</s></p>'
        '<lang xml:lang="fr-FR">Bonjour</lang> '
        '<phoneme alphabet="ipa" ph="t\u0259\u02c8me\u026ato\u028a">tomato</phoneme> '
        "<mark name='m1'/><audio src='x.wav'>a sound</audio> <unknown>kept</unknown><desc>not said</desc></speak>"
    )
    assert spoken(document) == "The World Wide Web Consortium is here. Bonjour tomato a sound kept"


@pytest.mark.parametrize(
    ("element", "words"),
    [
        ('<say-as interpret-as="characters">GW</say-as>', "G W"),
        ('<say-as interpret-as="spell-out">a1</say-as>', "A one"),
        ('<say-as interpret-as="cardinal">1,234</say-as>', "one thousand two hundred thirty-four"),
        ('<say-as interpret-as="ordinal">21</say-as>', "twenty-first"),
        ('<say-as interpret-as="ordinal">3rd</say-as>', "third"),
        ('<say-as interpret-as="digits">2048</say-as>', "two zero four eight"),
        ('<say-as interpret-as="date" format="mdy">12/03/2026</say-as>', "December third twenty twenty-six"),
        ('<say-as interpret-as="date" format="dmy">3.12.1999</say-as>', "December third nineteen ninety-nine"),
        ('<say-as interpret-as="date" format="y">1905</say-as>', "nineteen oh five"),
        ('<say-as interpret-as="time">10:30am</say-as>', "ten thirty A M"),
        ('<say-as interpret-as="time">14:00</say-as>', "fourteen hundred"),
        ('<say-as interpret-as="telephone">+1 555-0123</say-as>', "plus one, five five five, zero one two three"),
        ('<say-as interpret-as="cardinal">many</say-as>', "many"),  # not a number: as written
        ('<say-as interpret-as="unknown-kind">as is</say-as>', "as is"),
        ('<say-as interpret-as="characters">A<emphasis>B</emphasis></say-as>', "A B"),  # nested: its text
    ],
)
def test_say_as_is_read_as_its_words(element: str, words: str) -> None:
    assert spoken(f"<speak>{element}</speak>") == words


def test_prosody_rate_and_voice_make_spans_of_their_own() -> None:
    script = parse_ssml(
        '<speak>Hi <voice name="onyx">there <prosody rate="slow">slowly</prosody></voice>'
        '<prosody rate="150%">fast</prosody> <prosody rate="+20%">up</prosody> '
        '<prosody rate="x-fast"><prosody rate="2">capped</prosody></prosody> '
        '<prosody pitch="high">same</prosody></speak>'
    )
    assert script.parts == (
        Speech("Hi"),
        Speech("there", "onyx"),
        Speech("slowly", "onyx", 0.75),
        Speech("fast", None, 1.5),
        Speech("up", None, 1.2),
        Speech("capped", None, 3.0),
        Speech("same"),
    )


def test_a_script_of_one_plain_span_keys_the_cache_as_its_text() -> None:
    assert parse_ssml("<speak> Hello   there. </speak>").cache_text() == "Hello there."
    assert (
        parse_ssml('<speak>a<break time="1s"/>b</speak>').cache_text()
        != parse_ssml('<speak>a<break time="2s"/>b</speak>').cache_text()
    )


def test_plain_text_with_markup_inside_stays_plain() -> None:
    for text in ["a <b> c", "x < y and <speak> later", "speak>"]:
        assert not is_ssml(text)
        assert read_script(text, Markup.SSML) == Script.plain(text)
    assert read_script("Hello.", Markup.SSML) is not None
    assert is_ssml("  \n<speak>x</speak>")


def test_elevenlabs_break_tags_are_honoured_and_the_rest_read_as_written() -> None:
    script = read_script('Hi <break time="1.5s" /> there <b>bold</b> <break time="9s"/>end', Markup.BREAKS)
    assert script.parts == (Speech("Hi"), Silence(1.5), Speech("there <b>bold</b>"), Silence(3.0), Speech("end"))
    assert read_script("no tags here", Markup.BREAKS) == Script.plain("no tags here")


@pytest.mark.parametrize(
    ("text", "markup"),
    [
        ('<break time="1s"/>', Markup.BREAKS),
        (' <break time="1s" /> ', Markup.ELEVENLABS_SSML),
        ('<speak><break time="1s"/></speak>', Markup.SSML),
    ],
)
def test_a_text_of_a_break_alone_is_that_much_silence_however_it_is_read(text: str, markup: Markup) -> None:
    """The tag is never read aloud, as a text of its own or not: on ElevenLabs' routes, with or without
    ``enable_ssml_parsing``, and in SSML."""
    assert read_script(text, markup) == Script((Silence(1.0),))


@pytest.mark.parametrize("markup", [Markup.BREAKS, Markup.ELEVENLABS_SSML])
def test_a_text_of_breaks_that_last_no_time_is_refused_however_it_is_read(markup: Markup) -> None:
    with pytest.raises(MarkupError, match="no text to speak, nor a break that lasts"):
        read_script('<break time="0s"/> <break time="0ms"/>', markup)


def test_elevenlabs_ssml_parsing_needs_no_speak_root_and_says_where_in_the_callers_text() -> None:
    assert read_script('Say <sub alias="gateway">GW</sub>.', Markup.ELEVENLABS_SSML).text == "Say gateway."
    with pytest.raises(MarkupError) as raised:
        read_script("a & b", Markup.ELEVENLABS_SSML)
    assert (raised.value.line, raised.value.column) == (1, 4)  # expat: the character after the "&"


@pytest.mark.parametrize(
    ("document", "line", "column", "reason"),
    [
        ("<speak>a<b></speak>", 1, 14, "mismatched tag"),
        ("<speak>\n  <break time='soon'/>x</speak>", 2, 3, 'break time "soon"'),
        ('<speak><prosody rate="zoom">x</prosody></speak>', 1, 8, 'prosody rate "zoom"'),
        ("<speak>x</speak>trailing", 1, 17, "junk after document element"),
        ("<p>x</p>", 1, 1, "root element must be <speak>"),
        ('<speak><break time="0s"/></speak>', 1, 1, "no text to speak"),
    ],
)
def test_malformed_ssml_names_where_and_why(document: str, line: int, column: int, reason: str) -> None:
    with pytest.raises(MarkupError) as raised:
        parse_ssml(document)
    assert (raised.value.line, raised.value.column) == (line, column)
    assert reason in str(raised.value)
    assert f"line {line}, column {column}" in str(raised.value)


BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">' for i in range(1, 10))
    + "]><speak>&lol9;</speak>"
)
EXTERNAL_ENTITY = '<!DOCTYPE speak [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><speak>&xxe;</speak>'
DEEP = "<speak>" + "<s>" * 10_000 + "x" + "</s>" * 10_000 + "</speak>"
HUGE = "<speak>" + "word " * 200_000 + "</speak>"  # 1 MB
HOSTILE = {"billion laughs": BILLION_LAUGHS, "external entity": EXTERNAL_ENTITY, "10,000 deep": DEEP, "1 MB": HUGE}


@pytest.mark.parametrize("document", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_ssml_is_refused_within_100_ms_and_flat_memory(document: str) -> None:
    assert is_ssml(document)  # read as SSML, so refused, rather than read out
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(MarkupError):
        read_script(document, Markup.SSML)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 0.1
    assert peak < 1_000_000  # no expansion: well under the size of the input, or of one megabyte


def test_nesting_up_to_the_cap_is_read_and_one_more_level_is_not() -> None:
    def nested(depth: int) -> str:
        return "<speak>" + "<s>" * (depth - 1) + "x" + "</s>" * (depth - 1) + "</speak>"

    assert spoken(nested(MAX_DEPTH)) == "x"
    with pytest.raises(MarkupError, match="nested deeper"):
        parse_ssml(nested(MAX_DEPTH + 1))


def test_a_script_holds_at_most_max_parts() -> None:
    with pytest.raises(MarkupError, match="spans and breaks"):
        parse_ssml("<speak>" + 'a<break time="1ms"/>' * MAX_PARTS + "</speak>")


def test_the_pronunciation_hook_sees_every_span_and_identity_keeps_the_script() -> None:
    script = parse_ssml('<speak>GW one<break time="1s"/><voice name="onyx">GW two</voice></speak>')
    assert script.pronounced(IDENTITY) is script
    said = script.pronounced(lambda text: text.replace("GW", "gateway"))
    assert [p.text for p in said.parts if isinstance(p, Speech)] == ["gateway one", "gateway two"]
    with pytest.raises(MarkupError, match="nothing is left to say"):
        script.pronounced(lambda _: " ")
    silence = parse_ssml('<speak><break time="1s"/></speak>')
    assert silence.pronounced(lambda _: " ") is silence  # no span to respell: silence, never "nothing left"


_FRAGMENTS = st.sampled_from(
    [
        "<speak>", "</speak>", "<break/>", '<break time="', "1500ms", '"/>', "<sub alias='x'>", "</sub>", "<say-as ",
        "interpret-as='date' format='dmy'>", "12/3/99", "</say-as>", "<prosody rate='", "fast", "'>", "</prosody>",
        "<voice name='onyx'>", "</voice>", "<p>", "</p>", "&amp;", "&lol;", "<!DOCTYPE x>", "<![CDATA[x]]>",
        "<!-- c -->", "<?pi x?>", "text", " ", "\n", "<", ">", "&", "'", '"', "é", "\x00", "</", "/>", "=", "<s>",
        "</s>",
    ]
)  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_FRAGMENTS | st.text(max_size=8), max_size=40), st.sampled_from(list(Markup)))
def test_any_input_reads_as_a_script_or_a_markup_error(fragments: list[str], markup: Markup) -> None:
    text = "".join(fragments)
    started = time.perf_counter()
    try:
        script = read_script(text, markup)
    except MarkupError as error:
        where = (error.line, error.column)
        assert min(where) >= 1
    else:
        assert script.parts
        assert not script.empty
        if script != Script.plain(text):  # markup read: every span has something to say
            assert all(p.text.strip() for p in script.parts if isinstance(p, Speech))
        assert all(0 <= p.seconds <= MAX_BREAK_S for p in script.parts if isinstance(p, Silence))
    assert time.perf_counter() - started < 0.5
