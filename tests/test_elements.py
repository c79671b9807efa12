import numpy as np
import pytest

from tuner.core.dtypes import DataType
from tuner.core.elements import BF16_NAN, decode, empty_poisoned, encode, poison, storage_dtype


def torch_bf16_bits(values: np.ndarray) -> np.ndarray:
    torch = pytest.importorskip("torch")
    return torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def test_bf16_rounds_to_nearest_even_as_torch_does():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.uniform(-4, 4, 10_000), rng.standard_normal(10_000) * 1e-30,
                             [0.0, -0.0, 1.0, 3.0e38, -3.4e38, np.inf, -np.inf, 1 + 2**-8, 1 + 3 * 2**-8]])
    values = values.astype(np.float32)
    stored = encode(values, DataType.bf16)
    assert stored.dtype == np.uint16
    np.testing.assert_array_equal(stored, torch_bf16_bits(values))


def test_bf16_ties_go_to_even():
    # 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: even is 1; 1 + 3*2^-8 goes up to 1 + 2^-6
    stored = encode(np.array([1 + 2**-8, 1 + 3 * 2**-8], np.float32), DataType.bf16)
    assert decode(stored, DataType.bf16).tolist() == [1.0, 1 + 2**-6]


def test_bf16_nan_stays_nan():
    stored = encode(np.array([np.nan, -np.nan], np.float32), DataType.bf16)
    assert np.isnan(decode(stored, DataType.bf16)).all()


@pytest.mark.parametrize("dtype", list(DataType))
def test_decode_of_encode_is_the_rounded_value(dtype):
    values = np.array([0.5, -1.25, 3.0, 1 / 3], np.float32)
    decoded = decode(encode(values, dtype), dtype)
    assert decoded.dtype == np.float64
    bits = dtype.stored_significand_bits
    np.testing.assert_allclose(decoded, values, rtol=2.0 ** -bits)
    assert decoded[:3].tolist() == [0.5, -1.25, 3.0]  # exact in every type


def test_tf32_and_f32_are_stored_whole():
    values = np.array([1 / 3], np.float32)
    assert storage_dtype(DataType.tf32) == "float32"
    assert encode(values, DataType.tf32).tobytes() == values.tobytes()  # the tensor cores drop the low bits


@pytest.mark.parametrize("dtype", list(DataType))
def test_poisoned_arrays_read_as_nan(dtype):
    array = empty_poisoned((3, 2), dtype, np)
    assert array.dtype == np.dtype(storage_dtype(dtype))
    assert np.isnan(decode(array, dtype)).all()
    array[...] = 0
    poison(array, dtype)
    assert np.isnan(decode(array, dtype)).all()


def test_bf16_nan_bits():
    assert np.isnan(decode(np.array([BF16_NAN], np.uint16), DataType.bf16)).all()
