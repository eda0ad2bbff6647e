"""matmul.choose_blocks: counts each block once in VMEM, forgetting double buffering."""
PUZZLE = "matmul.choose_blocks"
EXPECT = "double-buffered"


def choose_blocks(M, K, N, *, itemsize, vmem_bytes):
    sublanes = max(8, 32 // itemsize)

    def legal(dim, align):
        return [b for b in range(1, dim + 1) if dim % b == 0 and (b % align == 0 or b == dim)]

    def vmem(bm, bk, bn):
        return itemsize * (bm * bk + bk * bn + bm * bn) + 4 * bm * bn

    def hbm(bm, bk, bn):
        a_reads = 1 if bk == K else N // bn
        b_reads = 1 if bk == K and bn == N else M // bm
        return itemsize * (M * K * a_reads + K * N * b_reads + M * N)

    fitting = [blocks for blocks in itertools.product(legal(M, sublanes), legal(K, 128),
                                                      legal(N, 128))
               if vmem(*blocks) <= vmem_bytes]
    return min(fitting, key=lambda blocks: hbm(*blocks))
