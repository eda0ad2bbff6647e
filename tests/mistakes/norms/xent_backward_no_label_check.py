"""norms.xent_backward: cross_entropy never looks at the labels' values: a label outside
[0, V) silently picks no logit (or garbage)."""
PUZZLE = "norms.xent_backward"
EXPECT = "np.asarray(labels) works on concrete values"


def cross_entropy(h, w, labels, *, block_t=128, block_v=512):
    (T, _), V = h.shape, w.shape[1]
    block_t, block_v = min(block_t, T), min(block_v, V)
    labels = labels.astype(jnp.int32)

    @jax.custom_vjp
    def loss(h, w, labels):
        return cross_entropy_forward(h, w, labels, block_t=block_t, block_v=block_v)[0]

    def loss_forward(h, w, labels):
        per_token, lse = cross_entropy_forward(h, w, labels, block_t=block_t, block_v=block_v)
        return per_token, (h, w, labels, lse)

    def loss_backward(residuals, dloss):
        dh, dw = cross_entropy_backward(*residuals, dloss, block_t=block_t, block_v=block_v)
        return dh, dw, None

    loss.defvjp(loss_forward, loss_backward)
    return loss(h, w, labels)
