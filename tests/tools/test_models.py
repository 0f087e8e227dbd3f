"""The model zoo: deterministic models and inputs, sane outputs, argument errors."""

import numpy as np
import pytest
import torch
from conftest import count_batch_norms, torch_forward

from accel_codegen import AccelInvalidError
from accel_codegen.models import MODELS, get_model

# name -> (example input shape at batch 1, output shape at batch 1)
ZOO = {
    "lenet5": ((1, 1, 32, 32), (1, 10)),
    "resnet18": ((1, 3, 224, 224), (1, 1000)),
    "resnet50": ((1, 3, 224, 224), (1, 1000)),
    "vgg11_bn": ((1, 3, 224, 224), (1, 1000)),
    "mobilenet_v1": ((1, 3, 224, 224), (1, 1000)),
    "mixed_block": ((1, 3, 32, 32), (1, 10)),
}


def test_registry_lists_the_zoo():
    assert sorted(MODELS) == sorted(ZOO)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_is_deterministic_and_sane(name):
    in_shape, out_shape = ZOO[name]
    model, inputs = get_model(name, seed=0)
    again, inputs_again = get_model(name, seed=0)
    assert not model.training
    assert len(inputs) == 1 and tuple(inputs[0].shape) == in_shape
    assert torch.equal(inputs[0], inputs_again[0])
    state, state_again = model.state_dict(), again.state_dict()
    assert list(state) == list(state_again)
    assert all(torch.equal(state[k], state_again[k]) for k in state), "same seed, other weights"

    out = torch_forward(model, *inputs)
    assert out.shape == out_shape and out.dtype == np.float32
    assert np.array_equal(out, torch_forward(again, *inputs_again))
    assert np.isfinite(out).all()
    # Non-degenerate: the logits spread out but stay O(1)-ish after a deep stack.
    assert 0.3 < float(out.std()) < 30.0, f"{name}: output std {out.std():.3g}"

    other, other_inputs = get_model(name, seed=1)
    assert not torch.equal(other_inputs[0], inputs[0])
    assert not np.array_equal(torch_forward(other, *inputs), out)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_batch_norm_is_not_identity(name):
    model, _ = get_model(name)
    for bn in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)):
        assert 0.5 <= float(bn.running_var.min()) and float(bn.running_var.max()) <= 1.5
        assert 0.5 <= float(bn.weight.min()) and float(bn.weight.max()) <= 1.5
        assert float(bn.running_mean.abs().max()) > 0 and float(bn.bias.abs().max()) > 0
    assert count_batch_norms(model) == {"lenet5": 0, "resnet18": 20, "resnet50": 53, "vgg11_bn": 8,
                                "mobilenet_v1": 27, "mixed_block": 1}[name]


@pytest.mark.parametrize("name,batch", [("lenet5", 3), ("mixed_block", 2)])
def test_zoo_batch(name, batch):
    model, (x,) = get_model(name, batch=batch)
    assert x.shape[0] == batch and torch_forward(model, x).shape[0] == batch


def test_zoo_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    get_model("lenet5", seed=7)
    assert torch.equal(torch.rand(4), expected)


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(AccelInvalidError, match=r"unknown model 'resnet19'.*lenet5.*resnet18"):
        get_model("resnet19")


@pytest.mark.parametrize("kwargs,words", [
    ({"batch": 0}, "batch = 0"), ({"batch": 1.5}, "batch = 1.5"), ({"seed": -1}, "seed = -1"),
])
def test_bad_zoo_arguments(kwargs, words):
    with pytest.raises(AccelInvalidError, match=words):
        get_model("lenet5", **kwargs)
