//! The one source of randomness: ChaCha20, seeded from the operating system, or from a
//! fixed seed that only a superuser can set (../shared/PRIVACY.md, section 7).
//!
//! One generator per process, created on first use. PostgreSQL forks its backends and
//! parallel workers from the postmaster, so the generator remembers the process it was
//! seeded in and a forked child never continues its parent's stream.

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::cell::RefCell;

/// Where the generator's seed comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seeding {
    /// Fresh entropy from the operating system (the default).
    Os,
    /// A fixed seed, for reproducible tests. `generation` changes each time the seed is
    /// set, so that setting the same seed again restarts the same stream.
    Fixed { seed: u64, generation: u64 },
}

struct Generator {
    seeding: Seeding,
    process: u32,
    rng: ChaCha20Rng,
}

thread_local! {
    static GENERATOR: RefCell<Option<Generator>> = const { RefCell::new(None) };
}

/// Runs `f` with this process's generator, (re)seeding it when `seeding` changed or the
/// process is not the one it was seeded in.
pub fn with_generator<T>(seeding: Seeding, f: impl FnOnce(&mut ChaCha20Rng) -> T) -> T {
    GENERATOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let process = std::process::id();
        let fresh = !matches!(&*slot, Some(g) if g.seeding == seeding && g.process == process);
        if fresh {
            let rng = match seeding {
                Seeding::Os => ChaCha20Rng::from_os_rng(),
                Seeding::Fixed { seed, .. } => ChaCha20Rng::seed_from_u64(seed),
            };
            *slot = Some(Generator {
                seeding,
                process,
                rng,
            });
        }
        f(&mut slot.as_mut().expect("generator was just created").rng)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngCore;

    #[test]
    fn a_fixed_seed_restarts_its_stream_when_set_again() {
        let fixed = |generation| Seeding::Fixed {
            seed: 42,
            generation,
        };
        let first = with_generator(fixed(1), |rng| rng.next_u64());
        let second = with_generator(fixed(1), |rng| rng.next_u64());
        assert_ne!(
            first, second,
            "the stream continues while the seed is unchanged"
        );
        assert_eq!(with_generator(fixed(2), |rng| rng.next_u64()), first);
    }

    #[test]
    fn os_seeding_differs_from_run_to_run() {
        let a = with_generator(Seeding::Os, |rng| rng.next_u64());
        // Leaving and re-entering OS seeding draws new entropy.
        with_generator(
            Seeding::Fixed {
                seed: 1,
                generation: 1,
            },
            |_| (),
        );
        let b = with_generator(Seeding::Os, |rng| rng.next_u64());
        assert_ne!(a, b);
    }
}
