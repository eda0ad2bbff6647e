"""quant.dequant: an argument check that indexes a_scale.shape[1] before knowing that a_scale
has two dims: a 1-D a_scale raises IndexError, not a ValueError naming it. The diagnosis
quotes the word it looked for and the line that failed."""
PUZZLE = "quant.dequant"
EXPECT = 'a ValueError whose message contains "a_scale" at quant/dequant_check_index_error.py:11'

_reference_int8_matmul = int8_matmul


def int8_matmul(a_q, a_scale, b_q, b_scale, *, bm=128, bk=128, bn=128):
    if a_scale.shape[1] != 1:
        raise ValueError(f"int8_matmul: a_scale must be float32 [M, 1]; got {a_scale.shape}")
    return _reference_int8_matmul(a_q, a_scale, b_q, b_scale, bm=bm, bk=bk, bn=bn)
