"""The epilogue's text form and the float64 reference that validates fused kernels."""
import math

import numpy as np
import pytest

from tuner.core.epilogue import Activation, Epilogue, EpilogueError, apply_epilogue, parse_epilogue


@pytest.mark.parametrize("text, parts, key", [
    ("none", (), "none"),
    ("bias+relu", ("bias", "relu"), "bias+relu"),
    ("relu, bias", ("bias", "relu"), "bias+relu"),  # any order, commas too: the key is canonical
    ("scale+bias+residual+relu", ("scale", "bias", "residual", "relu"), "scale+bias+residual+relu"),
    ("residual*0.5+silu", ("residual", "silu"), "residual*0.5+silu"),
    ("GELU", ("gelu",), "gelu"),
])
def test_parse_and_key(text, parts, key):
    epilogue = parse_epilogue(text)
    assert epilogue.parts == parts and epilogue.key == key
    assert parse_epilogue(epilogue.key) == epilogue
    assert epilogue.fused == (key != "none")


@pytest.mark.parametrize("text, says", [
    ("", "must be text"), ("bias+bias", "twice"), ("relu+silu", "two activations"), ("tanh", "unknown part 'tanh'"),
    ("residual*x", "not a number"), ("scale*2", "unknown part"), ("residual*inf", "finite"),
])
def test_bad_text_is_refused_with_what_is_wrong(text, says):
    with pytest.raises(EpilogueError, match=says):
        parse_epilogue(text)


def test_a_residual_scale_needs_a_residual():
    with pytest.raises(EpilogueError, match="needs a residual"):
        Epilogue(residual_scale=0.5)


def test_kernel_name_suffix_is_an_identifier_and_tells_kernels_apart():
    suffixes = {parse_epilogue(t).short for t in ("bias+relu", "scale+bias+relu", "scale+bias+residual+relu",
                                                   "bias+silu", "scale+bias")}
    assert len(suffixes) == 5 and all(s.startswith("_e") and s[1:].isidentifier() for s in suffixes)
    assert Epilogue().short == ""
    # beta is a run-time argument: one kernel serves every residual scale
    assert parse_epilogue("residual*0.5").short == parse_epilogue("residual").short


def test_reference_applies_scale_bias_residual_then_activation():
    conv = np.array([[[[-2.0, 1.0, 3.0]]]])
    scale, bias = np.array([2.0, 0.5, -1.0], dtype=np.float32), np.array([1.0, -1.0, 0.5], dtype=np.float32)
    residual = np.array([[[[1.0, 4.0, -8.0]]]], dtype=np.float16)
    got = apply_epilogue(conv, parse_epilogue("scale+bias+residual*0.5+relu"), scale, bias, residual)
    assert got.tolist() == [[[[0.0, 1.5, 0.0]]]]  # (-4+1+0.5, 0.5-1+2, -3+0.5-4) then ReLU
    assert got.dtype == np.float64


@pytest.mark.parametrize("activation, at_one", [(Activation.silu, 1 / (1 + math.exp(-1))),
                                                (Activation.gelu, 0.5 * (1 + math.erf(1 / math.sqrt(2))))])
def test_reference_activations_are_the_torch_forms(activation, at_one):
    got = apply_epilogue(np.array([1.0, 0.0]), Epilogue(activation=activation))
    assert got[0] == pytest.approx(at_one) and got[1] == 0.0


def test_no_epilogue_leaves_the_conv_as_it_is():
    conv = np.array([-1.0, 2.0])
    assert apply_epilogue(conv, Epilogue()) is conv
