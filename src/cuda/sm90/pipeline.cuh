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

// Slots filled by bulk copies: full[s] completes when slot s's bytes have
// landed (the producer's one arrival carries the byte count, the bulk copies
// the bytes). Tile j uses slot j % S in phase (j / S) & 1. How a slot is
// released is the kernel's: a Ring's empty barriers, or (one warpgroup, one
// CTA-wide barrier per tile) __syncthreads.
template <int S> struct Slots {
    uint64_t full[S];

    __device__ void init() {
        for (int s = 0; s < S; s++) mbar_init(&full[s], 1);
    }
    // Unsigned: a signed j % S costs the sign fix-ups on every tile.
    static __device__ __forceinline__ int slot(int j) { return (int)((uint32_t)j % S); }
    static __device__ __forceinline__ uint32_t phase(int j) { return ((uint32_t)j / S) & 1; }

    // Consumer side: tile j's bytes have landed.
    __device__ __forceinline__ void wait_full(int j) { mbar_wait(&full[slot(j)], phase(j)); }
    // Producer side: announce `bytes` to land in tile j's slot; the barrier
    // the copies complete on.
    __device__ __forceinline__ uint64_t *expect(int j, uint32_t bytes) {
        mbar_arrive_expect_tx(&full[slot(j)], bytes);
        return &full[slot(j)];
    }
};

// A ring of S slots between a producer thread and `Consumers` threads:
// empty[s] completes when every consumer thread has released slot s, each
// thread's own arrival ordering its reads of the slot before the copy that
// overwrites it.
template <int S, uint32_t Consumers> struct Ring : Slots<S> {
    using Slots<S>::full;
    using Slots<S>::slot;
    using Slots<S>::phase;
    uint64_t empty[S];

    __device__ void init() {
        for (int s = 0; s < S; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], Consumers);
        }
    }

    // Consumer side.
    __device__ __forceinline__ void release(int j) { mbar_arrive(&empty[slot(j)]); }

    // Producer side: wait until the slot of tile j is free (a fresh barrier
    // passes parity 1), then announce `bytes` to land in it.
    __device__ __forceinline__ uint64_t *acquire(int j, uint32_t bytes) {
        mbar_wait_suspended(&empty[slot(j)], phase(j) ^ 1);
        return this->expect(j, bytes);
    }
};
