/* The GPU KV pool's sizing arithmetic (model/decoder.h: cpt_kv_block_bytes, cpt_kv_pool_blocks), a pure function of
 * cudaMemGetInfo's figures, checked on the CPU: the pool takes rollout.gpu_memory_fraction of the device's total
 * memory minus what is in use, capped by the blocks asked for; nothing when the fraction is already used up. */
#include <string.h>

#include "check.h"
#include "model/decoder.h"

int main(void) {
    cpt_model_config c;
    memset(&c, 0, sizeof c);
    c.num_layers = 24, c.num_kv_heads = 2, c.head_dim = 64; /* Qwen2.5-0.5B's cache shape */
    size_t bb = cpt_kv_block_bytes(&c, 16, 2);
    CHECK_EQ_INT((long)bb, 24L * 2 * 16 * 2 * 64 * 2); /* K and V of 24 layers, 16 positions, bf16: 192 KiB */
    const size_t GiB = (size_t)1 << 30;
    /* 100 GiB device, 10 GiB in use (model + workspace): 0.9 leaves 80 GiB, 436906 blocks of 192 KiB */
    CHECK_EQ_INT(cpt_kv_pool_blocks(bb, 0.9, 90 * GiB, 100 * GiB, 1L << 40), 80L * GiB / bb);
    CHECK_EQ_INT(cpt_kv_pool_blocks(bb, 0.9, 90 * GiB, 100 * GiB, 1L << 40), 436906);
    CHECK_EQ_INT(cpt_kv_pool_blocks(bb, 0.9, 90 * GiB, 100 * GiB, 1000), 1000); /* capped by rollout.kv_blocks */
    CHECK_EQ_INT(cpt_kv_pool_blocks(bb, 0.5, 60 * GiB, 100 * GiB, 1L << 40), 10L * GiB / bb); /* another process */
    CHECK_EQ_INT(cpt_kv_pool_blocks(bb, 0.1, 90 * GiB, 100 * GiB, 1L << 40), 0); /* the fraction already used */
    CHECK_EQ_INT(cpt_kv_pool_blocks(bb, 0.9, 101 * GiB, 100 * GiB, 1L << 40), 0); /* nonsense figures */
    CHECK_EQ_INT(cpt_kv_pool_blocks(0, 0.9, 90 * GiB, 100 * GiB, 1L << 40), 0);
    /* Qwen2.5-7B: 28 layers, 4 kv heads of 128 */
    c.num_layers = 28, c.num_kv_heads = 4, c.head_dim = 128;
    CHECK_EQ_INT((long)cpt_kv_block_bytes(&c, 16, 2), 28L * 2 * 16 * 4 * 128 * 2);
    return check_summary("test_engine_kv_sizing");
}
