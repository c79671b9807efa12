import numpy as np
import pytest

from tuner.core.dtypes import DataType
from tuner.core.elements import BF16_NAN, E4M3_MAX, E4M3_NAN, decode, empty_poisoned, encode, poison, storage_dtype


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


# --- e4m3: every one of the 256 codes ------------------------------------------------------------------

E4M3_CODES = np.arange(256, dtype=np.uint8)
E4M3_NAN_CODES = (0x7F, 0xFF)


def e4m3_values() -> np.ndarray:
    return decode(E4M3_CODES, DataType.e4m3)


def test_e4m3_is_stored_as_one_byte_and_reads_its_landmarks():
    values = e4m3_values()
    assert storage_dtype(DataType.e4m3) == "uint8" and DataType.e4m3.bits == 8
    assert values[0x7E] == E4M3_MAX == 448.0 and values[0xFE] == -448.0
    assert values[0x01] == 2.0 ** -9 and values[0x08] == 2.0 ** -6 and values[0x38] == 1.0
    assert values[0x00] == 0.0 and np.signbit(values[0x80])
    assert [code for code in range(256) if np.isnan(values[code])] == list(E4M3_NAN_CODES)
    assert np.isfinite(values[[c for c in range(256) if c not in E4M3_NAN_CODES]]).all()  # no infinities


def test_every_e4m3_code_round_trips():
    values = e4m3_values()
    finite = ~np.isnan(values)
    np.testing.assert_array_equal(encode(values[finite].astype(np.float32), DataType.e4m3), E4M3_CODES[finite])
    assert np.isnan(decode(encode(values[~finite].astype(np.float32), DataType.e4m3), DataType.e4m3)).all()


def test_e4m3_codes_ascend_with_their_values():
    positive = e4m3_values()[:0x7F]
    assert (np.diff(positive) > 0).all()


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_e4m3_midpoints_round_to_the_even_code_and_their_neighbours_to_the_nearest(sign):
    values = e4m3_values()[:0x7F]  # 0 .. 448, ascending
    midpoints = (values[:-1] + values[1:]) / 2  # exact in f32: 4 significant bits and one more
    lower, upper = np.arange(0x7E), np.arange(1, 0x7F)
    even = np.where(lower % 2 == 0, lower, upper)
    signed = np.float32(sign) * midpoints.astype(np.float32)
    sign_bit = 0x80 if sign < 0 else 0
    np.testing.assert_array_equal(encode(signed, DataType.e4m3), even | sign_bit)
    below = np.nextafter(signed, np.float32(0), dtype=np.float32)
    above = np.nextafter(signed, np.float32(sign * np.inf), dtype=np.float32)
    np.testing.assert_array_equal(encode(below, DataType.e4m3), lower | sign_bit)
    np.testing.assert_array_equal(encode(above, DataType.e4m3), upper | sign_bit)


def test_e4m3_saturates_at_448():
    large = np.array([448, 449, 463.99, 464, 465, 479, 480, 1e6, 3.4e38, np.inf], np.float32)
    assert encode(large, DataType.e4m3).tolist() == [0x7E] * len(large)
    assert encode(-large, DataType.e4m3).tolist() == [0xFE] * len(large)


def test_e4m3_nan_is_0x7f_with_its_sign():
    assert encode(np.array([np.nan, -np.nan], np.float32), DataType.e4m3).tolist() == [0x7F, 0xFF]


def test_e4m3_flushes_below_half_the_smallest_subnormal_to_signed_zero():
    tiny = np.array([2.0 ** -10, 2.0 ** -11, 1e-30, 0.0], np.float32)
    assert encode(tiny, DataType.e4m3).tolist() == [0, 0, 0, 0]  # 2^-10 is the tie between 0 and 2^-9: even 0
    assert encode(-tiny, DataType.e4m3).tolist() == [0x80] * 4
    assert encode(np.array([2.0 ** -10 * 1.01, 3 * 2.0 ** -10], np.float32), DataType.e4m3).tolist() == [1, 2]


def test_e4m3_rounds_as_torch_float8_e4m3fn_in_range():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.uniform(-448, 448, 20_000), rng.standard_normal(20_000) * 2.0 ** -6,
                             rng.standard_normal(20_000)]).astype(np.float32)
    expected = torch.from_numpy(values).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    np.testing.assert_array_equal(encode(values, DataType.e4m3), expected)


def test_e4m3_poison_is_its_nan():
    array = empty_poisoned((4,), DataType.e4m3, np)
    assert array.tolist() == [E4M3_NAN] * 4
