// How the threads of a CTA wait for each other: the ring of shared-memory
// slots between the producer and the consumers (mbarriers), and the named
// barriers (bar.sync ids) the consumers order themselves with.
#pragma once
#include "ptx.cuh"

// Named barriers; id 0 is __syncthreads'. The D 128 kernel's consumer w
// may issue its GEMMs once it passes kBarrierTurn + w (the two take turns),
// and waits on kBarrierMean + w, its own 128 threads, before a wgmma reads
// the row-sum image those threads wrote.
enum NamedBarrier : uint32_t { kBarrierTurn = 1, kBarrierMean = 3 };

// full[s] completes when slot s's bytes have landed (the producer's one
// arrival carries the byte count, the bulk copies the bytes), empty[s] when
// each of the `Consumers` threads has released it: each thread's own arrival
// orders its reads of the slot before the copy that overwrites it. Tile j
// uses slot j % S in phase (j / S) & 1.
template <int S, uint32_t Consumers> struct Ring {
    uint64_t full[S], empty[S];

    __device__ void init() {
        for (int s = 0; s < S; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], Consumers);
        }
    }
    // Unsigned: a signed j % S costs the sign fix-ups on every tile.
    static __device__ __forceinline__ int slot(int j) { return (int)((uint32_t)j % S); }
    static __device__ __forceinline__ uint32_t phase(int j) { return ((uint32_t)j / S) & 1; }

    // Consumer side.
    __device__ __forceinline__ void wait_full(int j) { mbar_wait(&full[slot(j)], phase(j)); }
    __device__ __forceinline__ void release(int j) { mbar_arrive(&empty[slot(j)]); }

    // Producer side: wait until the slot of tile j is free (a fresh barrier
    // passes parity 1), then announce `bytes` to land in it.
    __device__ __forceinline__ uint64_t *acquire(int j, uint32_t bytes) {
        mbar_wait_suspended(&empty[slot(j)], phase(j) ^ 1);
        mbar_arrive_expect_tx(&full[slot(j)], bytes);
        return &full[slot(j)];
    }
};
