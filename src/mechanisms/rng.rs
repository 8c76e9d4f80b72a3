//! The one source of randomness: ChaCha20, seeded from the operating system, or from a
//! fixed seed that only a superuser can set (../shared/PRIVACY.md, section 7).
//!
//! One generator per process, created on first use. PostgreSQL forks its backends and
//! parallel workers from the postmaster, so the generator remembers the process it was
//! seeded in and a forked child never continues its parent's stream.

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Once;

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
    process: u64,
    rng: ChaCha20Rng,
}

/// Forks this process image went through: each child adds one as it starts (a
/// pthread_atfork handler), so a child never reads its parent's number. A getpid() system
/// call per draw cost 120 ns (8 % of a 10^5-group dp_quantile, issue 22). It assumes
/// that a copy of the process is made by libc's fork(), which runs the handlers, as
/// PostgreSQL's fork_process() does for every backend and worker (a raw clone() or
/// _Fork() without exec would not be seen).
static FORKS: AtomicU64 = AtomicU64::new(0);
static COUNTING_FORKS: AtomicBool = AtomicBool::new(false);

extern "C" fn count_fork() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// This process among those that share its memory image: the forks counted, or its
/// process id (marked by the top bit) if the handler could not be registered.
fn process() -> u64 {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: the handler only adds to an atomic (async-signal-safe, as a child's
        // handler must be); registering it has no other effect.
        let registered = unsafe { libc::pthread_atfork(None, None, Some(count_fork)) } == 0;
        COUNTING_FORKS.store(registered, Ordering::Relaxed);
    });
    if COUNTING_FORKS.load(Ordering::Relaxed) {
        FORKS.load(Ordering::Relaxed)
    } else {
        1 << 63 | std::process::id() as u64
    }
}

thread_local! {
    static GENERATOR: RefCell<Option<Generator>> = const { RefCell::new(None) };
}

/// Runs `f` with this process's generator, (re)seeding it when `seeding` changed or the
/// process is not the one it was seeded in.
pub fn with_generator<T>(seeding: Seeding, f: impl FnOnce(&mut ChaCha20Rng) -> T) -> T {
    GENERATOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let process = process();
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

    /// A forked child restarts a fixed seed's stream (a fresh generator), where
    /// continuing it would repeat the parent's next word.
    #[test]
    fn a_forked_child_never_continues_its_parents_stream() {
        let fixed = Seeding::Fixed {
            seed: 7,
            generation: 1,
        };
        let first = with_generator(fixed, |rng| rng.next_u64());
        let mut pipe = [0; 2];
        // SAFETY: a pipe (closed on exec, so that other tests' children do not hold it),
        // a fork and, in the child, a draw (no allocation: the generator lives in a
        // thread-local slot), a write and _exit, also if the draw panics. The parent
        // closes its write end before reading, so a child that wrote nothing is an end of
        // file rather than a hang, and checks how the child exited.
        let (read, status, word) = unsafe {
            assert_eq!(libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC), 0);
            let child = libc::fork();
            assert!(child >= 0, "fork");
            if child == 0 {
                let drawn = std::panic::catch_unwind(|| with_generator(fixed, |r| r.next_u64()));
                if let Ok(word) = drawn {
                    libc::write(pipe[1], word.to_ne_bytes().as_ptr().cast(), 8);
                }
                libc::_exit(drawn.is_err() as i32);
            }
            libc::close(pipe[1]);
            let mut word = [0u8; 8];
            let read = libc::read(pipe[0], word.as_mut_ptr().cast(), 8);
            let mut status = 0;
            libc::waitpid(child, &mut status, 0);
            libc::close(pipe[0]);
            (read, status, u64::from_ne_bytes(word))
        };
        assert!(
            read == 8 && status == 0,
            "the child read {read} bytes, exited {status}"
        );
        let from_child = word;
        let parents_next = with_generator(fixed, |rng| rng.next_u64());
        assert_ne!(parents_next, first);
        assert_eq!(from_child, first, "the child continued its parent's stream");
    }

    #[test]
    fn forked_children_and_grandchildren_of_os_seeding_draw_their_own_streams() {
        let parents_first = with_generator(Seeding::Os, |rng| rng.next_u64());
        let mut pipe = [0; 2];
        // SAFETY: as in the test above, with one more generation: the child forks a
        // grandchild, which writes its word and exits; the child waits for it, then
        // writes its own two words and exits. Only the parent reads, after closing its
        // write end, so that a process that wrote nothing is an end of file.
        let (read, status, words) = unsafe {
            assert_eq!(libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC), 0);
            let child = libc::fork();
            assert!(child >= 0, "fork");
            if child == 0 {
                let failed = std::panic::catch_unwind(|| {
                    let first = with_generator(Seeding::Os, |rng| rng.next_u64());
                    let grandchild = libc::fork();
                    if grandchild == 0 {
                        let drawn = std::panic::catch_unwind(|| {
                            with_generator(Seeding::Os, |rng| rng.next_u64())
                        });
                        if let Ok(word) = drawn {
                            libc::write(pipe[1], word.to_ne_bytes().as_ptr().cast(), 8);
                        }
                        libc::_exit(drawn.is_err() as i32);
                    }
                    let mut status = 0;
                    libc::waitpid(grandchild, &mut status, 0);
                    let next = with_generator(Seeding::Os, |rng| rng.next_u64());
                    for word in [first, next] {
                        libc::write(pipe[1], word.to_ne_bytes().as_ptr().cast(), 8);
                    }
                    grandchild < 0 || status != 0
                });
                libc::_exit(!matches!(failed, Ok(false)) as i32);
            }
            libc::close(pipe[1]);
            let mut bytes = [0u8; 24];
            let mut read = 0;
            while read < bytes.len() {
                let n = libc::read(
                    pipe[0],
                    bytes[read..].as_mut_ptr().cast(),
                    bytes.len() - read,
                );
                if n <= 0 {
                    break;
                }
                read += n as usize;
            }
            let mut status = 0;
            libc::waitpid(child, &mut status, 0);
            libc::close(pipe[0]);
            let word = |i: usize| u64::from_ne_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap());
            (read, status, [word(0), word(1), word(2)])
        };
        assert!(
            read == 24 && status == 0,
            "read {read} bytes, the child exited {status}"
        );
        let [grandchilds, childs_first, childs_next] = words;
        let parents_next = with_generator(Seeding::Os, |rng| rng.next_u64());
        let all = [
            parents_first,
            parents_next,
            childs_first,
            childs_next,
            grandchilds,
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b, "two processes drew the same word: {all:x?}");
            }
        }
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
