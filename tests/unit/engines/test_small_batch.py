"""The linear layers of ChatTTS's backbone on CPU (``weight @ rows.T``, oneDNN's blocked weights) compute what
``nn.Linear`` computes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from engines.base import CancelFlag
from engines.chattts import ChatTTSEngine, small_batch
from engines.chattts.small_batch import (
    MAX_ROWS,
    PREFILL_ROWS,
    Products,
    SmallBatchLinear,
    blocked_weight,
    measure_products,
    use_small_batch_linear,
)
from tests.chattts_assets import chattts_engine_options

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

ALL_ROWS = frozenset(range(1, MAX_ROWS + 1))


def switched(linear: nn.Linear, transposed: frozenset[int] = frozenset(), blocked: frozenset[int] = frozenset()) -> Any:
    twin = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    twin.load_state_dict(linear.state_dict())
    twin.__class__ = SmallBatchLinear
    object.__setattr__(twin, "transposed_rows", transposed)
    object.__setattr__(twin, "blocked_rows", blocked)
    object.__setattr__(twin, "blocked", blocked_weight(twin.weight) if blocked else None)
    return twin


SWITCHES = {
    "transposed": lambda linear: switched(linear, transposed=ALL_ROWS),
    "blocked": lambda linear: switched(linear, blocked=ALL_ROWS | {PREFILL_ROWS}),
}


@pytest.mark.parametrize("way", sorted(SWITCHES))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 64), (3, 64), (5, 1, 64), (2, 4, 64), (12, 64), (70, 64)])
def test_the_product_is_the_linear_layers(way: str, bias: bool, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(64, 96, bias=bias)
    x = torch.randn(*shape)
    out = SWITCHES[way](linear)(x)
    assert out.shape == linear(x).shape
    torch.testing.assert_close(out, linear(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("way", sorted(SWITCHES))
def test_rows_laid_out_transposed_give_the_same_product(way: str) -> None:
    # As they come from an earlier transposed product through an elementwise op (the MLP's activation).
    torch.manual_seed(2)
    linear = nn.Linear(64, 96)
    x = torch.randn(64, 3).T
    assert not x.is_contiguous()
    torch.testing.assert_close(SWITCHES[way](linear)(x), linear(x), rtol=1e-5, atol=1e-5)


def test_each_row_count_takes_its_own_way() -> None:
    torch.manual_seed(3)
    linear = nn.Linear(64, 96)
    layer = switched(linear, transposed=frozenset({2}), blocked=frozenset({4, PREFILL_ROWS}))
    for rows in (1, 2, 4, 12, PREFILL_ROWS):  # 12: above MAX_ROWS, the prefill's way
        x = torch.randn(rows, 64)
        torch.testing.assert_close(layer(x), linear(x), rtol=1e-5, atol=1e-5)


def test_the_measured_choice_is_one_way_per_row_count() -> None:
    weights = [torch.randn(256, 128), torch.randn(256, 128)]
    products = measure_products(weights)
    assert products.transposed_rows <= ALL_ROWS
    assert products.blocked_rows <= ALL_ROWS | {PREFILL_ROWS}
    assert not products.transposed_rows & products.blocked_rows
    if products.blocked_rows:
        assert products.blocked is not None
        assert [tuple(b.shape) for b in products.blocked] == [(256, 128)] * 2
    else:
        assert products.blocked is None  # no second copy of weights that no row count uses


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_weights_of_any_dtype_are_measured(dtype: torch.dtype) -> None:
    # oneDNN lays out float16 only on CPUs with float16 arithmetic: elsewhere the measurement goes on without it.
    products = measure_products([torch.randn(96, 64, dtype=dtype)])
    assert products.blocked is None or [b.dtype for b in products.blocked] == [dtype]


def test_without_blocked_weights_no_copy_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    products = measure_products([torch.randn(256, 128)], blocked=False)
    assert products.blocked is None and not products.blocked_rows
    asked: list[bool] = []

    def measured(weights: list[torch.Tensor], *, blocked: bool = True) -> Products:
        asked.append(blocked)
        return measure_products(weights, blocked=blocked)

    monkeypatch.setattr(small_batch, "measure_products", measured)
    engine = ChatTTSEngine(chattts_engine_options(blocked_weights=False))
    engine.load()
    assert asked and not any(asked)  # the option reaches every weight shape's measurement
    assert not [m for m in engine._chat.gpt.gpt.modules() if getattr(m, "blocked", None) is not None]


def test_switching_a_model_keeps_its_outputs_and_leaves_other_modules_alone() -> None:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 128), nn.LayerNorm(128))
    x = torch.randn(4, 1, 128)
    before = model(x)
    ways = use_small_batch_linear(model)
    assert {type(m) for m in (model[0], model[2])} <= {nn.Linear, SmallBatchLinear}  # each shape decided alone
    layers = [m for m in model if type(m) is SmallBatchLinear]
    assert bool(layers) == bool(ways)
    assert set(ways.get("transposed", [])) == {rows for m in layers for rows in m.transposed_rows}
    assert set(ways.get("blocked", [])) == {rows for m in layers for rows in m.blocked_rows}
    assert type(model[3]) is nn.LayerNorm
    torch.testing.assert_close(model(x), before, rtol=1e-5, atol=1e-5)
    assert model.state_dict().keys() == {"0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"}


def test_a_backbone_on_blocked_weights_generates_what_it_does_on_plain_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """The token loop through a whole backbone of blocked layers (prefill and decode steps, rows joining): every hidden
    state as with plain ``nn.Linear`` layers, the same seeded tokens."""
    from engines.chattts.generation import CodeBatch, CodeRequest, Sampling

    def hiddens(engine: ChatTTSEngine) -> list[Any]:
        assert engine._voices is not None
        prompt = engine.prompts.named_voice_prompt("words to say")
        requests = [CodeRequest(k, prompt[k:], engine._voices.named["alloy"], k, 12, 12, CancelFlag()) for k in (0, 1)]
        batch = CodeBatch(engine._chat, Sampling())
        batch.join(requests[:1])
        found = [hidden for _ in range(3) for key, hidden in batch.step() if hidden is not None]
        batch.join(requests[1:])
        while batch.size:
            found += [hidden for key, hidden in batch.step() if hidden is not None]
        return found

    monkeypatch.setattr(small_batch, "measure_products", lambda weights, **_: Products())
    plain = ChatTTSEngine(chattts_engine_options())
    plain.load()
    every_count = ALL_ROWS | {PREFILL_ROWS}
    monkeypatch.setattr(
        small_batch, "measure_products",
        lambda weights, **_: Products(blocked_rows=every_count, blocked=[blocked_weight(w) for w in weights]),
    )  # fmt: skip
    on_blocked = ChatTTSEngine(chattts_engine_options())
    on_blocked.load()
    layers = [m for m in on_blocked._chat.gpt.gpt.modules() if isinstance(m, nn.Linear)]
    assert layers and all(type(m) is SmallBatchLinear and m.blocked is not None for m in layers)
    expected, found = hiddens(plain), hiddens(on_blocked)
    assert len(found) == len(expected) == 24
    torch.testing.assert_close(torch.stack(found), torch.stack(expected), rtol=1e-4, atol=1e-4)
