"""matmul.choose_blocks: the plain formula, a read N / bn times even when bk == K."""
PUZZLE = "matmul.choose_blocks"
EXPECT = "when bk == K, a's block stays in VMEM across j"


def choose_blocks(M, K, N, *, itemsize, vmem_bytes):
    sublanes = max(8, 32 // itemsize)

    def legal(dim, align):
        return [b for b in range(1, dim + 1) if dim % b == 0 and (b % align == 0 or b == dim)]

    def vmem(bm, bk, bn):
        return 2 * itemsize * (bm * bk + bk * bn + bm * bn) + 4 * bm * bn

    def hbm(bm, bk, bn):
        return itemsize * (M * K * (N // bn) + K * N * (M // bm) + M * N)

    fitting = [blocks for blocks in itertools.product(legal(M, sublanes), legal(K, 128),
                                                      legal(N, 128))
               if vmem(*blocks) <= vmem_bytes]
    return min(fitting, key=lambda blocks: (hbm(*blocks), -blocks[1]))
