// Package simkit is the machinery the two seeded simulations share: the
// single-node one (tests/sim) and the multi-node one (tests/sim/cluster).
//
//   - History and its per-key register model: the porcupine
//     linearizability check of a sample of keys (history.go). The split
//     stress test (tests.TestSplitLinearizable) records its concurrent
//     clients in one too, every key sampled.
//   - PatchesApply: every mutation patch must still apply to the product
//     code it breaks, or its catch shows nothing (patches.go).
//   - The seed runner: SeedRange reads SHARDSPLIT_SIM_SEED and
//     SHARDSPLIT_SIM_SEEDS, RunSeeds runs the seeds on parallel workers
//     (SHARDSPLIT_SIM_PROGRESS=1 prints each as it starts), Report fails a
//     test once per failed seed with its rerun line and groups the failures
//     by finding, Ran words the head of the summary line other tools and
//     the docs grep, Divergence says where two runs of a seed parted, for
//     the determinism checks (seeds.go).
//
// What differs between the simulations (their worlds, faults, statistics,
// checks and the wording of their own lines) stays in them. It is a
// package, not a test file, so both simulations can import it; only test
// harnesses may (tests/lint_test.go).
package simkit
