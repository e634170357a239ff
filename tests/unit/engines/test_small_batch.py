"""The small-batch linear layer of ChatTTS's decode steps computes what ``nn.Linear`` computes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from engines.chattts.small_batch import MAX_ROWS, SmallBatchLinear, faster_transposed_rows, use_small_batch_linear

ALL_ROWS = frozenset(range(1, MAX_ROWS + 1))


def switched(linear: nn.Linear, rows: frozenset[int]) -> nn.Module:
    twin = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    twin.load_state_dict(linear.state_dict())
    twin.__class__ = SmallBatchLinear
    object.__setattr__(twin, "transposed_rows", rows)
    return twin


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 64), (3, 64), (5, 1, 64), (2, 4, 64), (12, 64)])
def test_the_product_is_the_linear_layers(bias: bool, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(64, 96, bias=bias)
    x = torch.randn(*shape)
    out = switched(linear, ALL_ROWS)(x)
    assert out.shape == linear(x).shape
    torch.testing.assert_close(out, linear(x), rtol=1e-5, atol=1e-5)


def test_rows_laid_out_transposed_give_the_same_product() -> None:
    # As they come from an earlier transposed product through an elementwise op (the MLP's activation).
    torch.manual_seed(2)
    linear = nn.Linear(64, 96)
    x = torch.randn(64, 3).T
    assert not x.is_contiguous()
    torch.testing.assert_close(switched(linear, ALL_ROWS)(x), linear(x), rtol=1e-5, atol=1e-5)


def test_the_measured_rows_are_small_batches() -> None:
    rows = faster_transposed_rows([torch.randn(256, 128), torch.randn(128, 256), torch.randn(256, 128)])
    assert rows <= ALL_ROWS


def test_switching_a_model_keeps_its_outputs_and_leaves_other_modules_alone() -> None:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 128), nn.LayerNorm(128))
    x = torch.randn(4, 1, 128)
    before = model(x)
    rows = use_small_batch_linear(model)
    switched = [m for m in model if type(m) is SmallBatchLinear]
    assert all(type(m) in {nn.Linear, SmallBatchLinear} for m in (model[0], model[2]))  # each shape decided alone
    assert bool(switched) == bool(rows)
    assert all(m.transposed_rows <= rows for m in switched)
    assert type(model[3]) is nn.LayerNorm
    torch.testing.assert_close(model(x), before, rtol=1e-5, atol=1e-5)
    assert model.state_dict().keys() == {"0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"}
