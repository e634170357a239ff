"""The prefill's products in fewer bits (``prefill_weights``, ``engines/chattts/prefill.py``), on tiny random-weight
assets: with 8-bit decode steps the prefill passes go through the chosen product, their last hidden state stays
within a stated tolerance of float32's, a row's 8-bit product does not depend on the rows beside it, the decode graph
steps the running rows of a pass that prefills a joiner, and the engine still speaks each request's own audio."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from engines.base import CancelFlag, SynthesisRequest
from engines.chattts import ChatTTSEngine, prefill
from engines.chattts.generation import CodeBatch, CodeRequest, Sampling
from engines.chattts.prefill import PrefillLinear, bfloat16_product, int8_product, use_fast_prefill
from engines.chattts.small_batch import MAX_ROWS
from tests.chattts_assets import TEST_TOKENS, chattts_engine_options

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

SAMPLES_PER_SEGMENT = TEST_TOKENS * 512 - 256
TOLERANCE = {"int8": 1.3e-3, "bfloat16": 3e-4}
"""Largest difference of a prefill's last hidden state from float32's, ten times what was measured here (1.3e-4 for
int8, 2.4e-5 for bfloat16, of a state whose largest value is 2.9); the full model's: BENCHMARKS.md."""
PROMPT = list(range(1, 41))
"""40 positions: more rows than a decode step's (``MAX_ROWS``), so the prefill product computes them."""
MAKERS: dict[str, Callable[[torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]] = {
    "int8": int8_product, "bfloat16": bfloat16_product,
}  # fmt: skip


@pytest.fixture(scope="module", params=["int8", "bfloat16"])
def engine(request: pytest.FixtureRequest) -> ChatTTSEngine:
    if request.param == "bfloat16" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("oneDNN has no bfloat16 product on this CPU (it needs AVX-512)")
    loaded = ChatTTSEngine(chattts_engine_options(
        decoder="onnxruntime", weights="int8", prefill_weights=request.param, max_batch=4,
    ))  # fmt: skip
    info = loaded.load()
    assert (info.details["decode_weights"], info.details["prefill_weights"]) == ("int8", request.param)
    return loaded


def linears(engine: ChatTTSEngine) -> list[Any]:
    return [module for module in engine._chat.gpt.gpt.modules() if isinstance(module, nn.Linear)]


def prefill_hidden(engine: ChatTTSEngine) -> torch.Tensor:
    """The last hidden state of the engine's torch pass over ``PROMPT``, waiting alone (a request at an idle worker)."""
    batch = CodeBatch(engine._chat, Sampling())
    batch.join([CodeRequest(0, PROMPT, None, 0, 8, 0, CancelFlag())])
    with torch.inference_mode():
        (hidden,) = batch._torch_forward(batch._parts())
    return hidden[0]


def test_the_prefill_goes_through_the_chosen_product_within_tolerance(engine: ChatTTSEngine) -> None:
    way = engine.options.prefill_weights
    modules = linears(engine)
    assert modules and all(type(module) is PrefillLinear and module.prefill is not None for module in modules)
    calls: list[int] = []
    product: Callable[[torch.Tensor], torch.Tensor] = modules[0].prefill

    def counted(rows: torch.Tensor) -> torch.Tensor:
        calls.append(len(rows))
        return product(rows)

    object.__setattr__(modules[0], "prefill", counted)
    try:
        fewer_bits = prefill_hidden(engine)
    finally:
        object.__setattr__(modules[0], "prefill", product)
    assert calls == [len(PROMPT)], "the prompt's positions went through the prefill product, in one pass"
    for module in modules:
        object.__setattr__(module, "prefill", None)  # float32, as before
    try:
        float32 = prefill_hidden(engine)
    finally:
        for module, made in zip(modules, [MAKERS[way](module.weight) for module in modules], strict=True):
            object.__setattr__(module, "prefill", made)
    difference = float((fewer_bits - float32).abs().max())
    assert 0 < difference < TOLERANCE[way], f"{way} prefill differs from float32's by {difference}"


def test_a_decode_steps_few_rows_stay_float32(engine: ChatTTSEngine) -> None:
    module = linears(engine)[0]
    rows = torch.randn(MAX_ROWS, module.in_features)
    with torch.inference_mode():
        torch.testing.assert_close(module(rows), F.linear(rows, module.weight, module.bias))


def test_the_float32_blocked_copies_go_where_the_graph_steps(engine: ChatTTSEngine) -> None:
    assert all(module.blocked is None and not module.blocked_rows for module in linears(engine))


def test_each_request_gets_its_own_whole_audio(engine: ChatTTSEngine) -> None:
    requests = [
        SynthesisRequest("One sentence.", "alloy", seed=1),
        SynthesisRequest("Two of them. Yes.", "nova", seed=2),
    ]
    items: dict[int, list[Any]] = {0: [], 1: []}
    for index, item in engine.synthesize_batch(requests, [CancelFlag(), CancelFlag()]):
        assert not isinstance(item, Exception)
        items[index].append(item)
    for index, segments in enumerate((1, 2)):
        assert items[index][-1] is None
        audio = np.concatenate(items[index][:-1])
        assert len(audio) == segments * SAMPLES_PER_SEGMENT
        assert np.abs(audio.astype(np.int32)).max() > 0


def test_a_running_rows_step_is_the_graphs_while_a_prompt_is_prefilled_beside_it(engine: ChatTTSEngine) -> None:
    """The pass that prefills a joiner steps the running row through the decode graph, as every other step of it:
    its hidden state there is bit for bit the one it has with nobody joining."""

    def hidden_states(joins_at: int | None) -> list[torch.Tensor]:
        batch = CodeBatch(engine._chat, Sampling(), graph=engine._graph)
        batch.join([CodeRequest(0, PROMPT, None, 3, 8, 8, CancelFlag())])
        states = []
        for step in range(4):
            if step == joins_at:
                batch.join([CodeRequest(1, PROMPT[::-1], None, 4, 8, 8, CancelFlag())])
            states += [hidden for key, hidden in batch.step() if key == 0 and hidden is not None]
        return states

    with torch.inference_mode():
        alone, joined = hidden_states(None), hidden_states(2)
    assert len(alone) == len(joined) == 4
    assert all(torch.equal(a, b) for a, b in zip(alone[:3], joined[:3], strict=True))


def test_an_8_bit_row_is_computed_as_if_alone() -> None:
    """Rows 10,000 times apart in size, each within 3 % of float32's product, and bit for bit what it is alone."""
    torch.manual_seed(0)
    weight = torch.randn(96, 64) * 0.05
    rows = torch.randn(12, 64) * torch.logspace(-2, 2, 12).unsqueeze(1)
    rows[3] = 0.0
    product = int8_product(weight)
    with torch.inference_mode():
        together = product(rows)
        for index, row in enumerate(rows):
            assert torch.equal(together[index], product(row.unsqueeze(0))[0]), f"row {index} depends on the others"
        expected = rows @ weight.T
    assert torch.equal(together[3], torch.zeros(96))
    errors = (together - expected).norm(dim=1) / expected.norm(dim=1).clamp(min=1e-30)
    assert float(errors[torch.arange(12) != 3].max()) < 0.03


@pytest.mark.parametrize(("option", "int8_decode"), [("auto", False), ("float32", True)])
def test_float32_where_not_asked_for(option: str, int8_decode: bool) -> None:
    backbone = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16))
    assert use_fast_prefill(backbone, option, int8_decode=int8_decode, drop_blocked=True) == "float32"
    assert all(type(module) is nn.Linear for module in backbone)


@pytest.mark.parametrize(
    ("bfloat16", "avx2", "way"), [(True, True, "bfloat16"), (False, True, "int8"), (False, False, "float32")]
)
def test_auto_with_8_bit_steps_takes_what_the_cpu_multiplies_fast(
    bfloat16: bool, avx2: bool, way: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if way == "bfloat16" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("oneDNN has no bfloat16 product on this CPU (it needs AVX-512)")
    cpuinfo = tmp_path / "cpuinfo"
    flags = ["fpu", "sse2", *(["avx2"] if avx2 else []), *(["avx512f", "avx512_bf16", "avx512bw"] if bfloat16 else [])]
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {' '.join(flags)}\n")
    assert (prefill.bfloat16_arithmetic(cpuinfo), prefill.int8_arithmetic(cpuinfo)) == (bfloat16, avx2)
    monkeypatch.setattr(prefill, "bfloat16_arithmetic", lambda: bfloat16)
    monkeypatch.setattr(prefill, "int8_arithmetic", lambda: avx2)
    torch.manual_seed(0)
    first, second = nn.Linear(256, 512), nn.Linear(512, 256)
    before = [first.weight.detach().clone(), second.weight.detach().clone()]
    assert use_fast_prefill(nn.Sequential(first, second), "auto", int8_decode=True, drop_blocked=False) == way
    rows = torch.randn(2 * MAX_ROWS, 256)
    with torch.inference_mode():
        out = second(first(rows))
        expected = F.linear(F.linear(rows, before[0], first.bias), before[1], second.bias)
    bound = 0.05 if way == "int8" else 0.02  # two products' rounding of 7-bit activations: 0.03 measured
    torch.testing.assert_close(out, expected, rtol=bound, atol=bound)
    assert torch.equal(first.weight, before[0]) and torch.equal(second.weight, before[1]), "float32 weights kept"


def test_no_cpu_flags_no_fewer_bits(tmp_path: Path) -> None:
    assert not prefill.bfloat16_arithmetic(tmp_path / "missing")
    assert not prefill.int8_arithmetic(tmp_path / "missing")
