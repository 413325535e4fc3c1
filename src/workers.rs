//! Spreading independent, pure-or-read-only work over the machine's cores: discovery's reads
//! (each a system call that scales with cores), the level-0 checks and the path matrix.
//!
//! This module must not know what the work is, and must not change the outcome: results come
//! back in the order of the items, exactly as a sequential map would give them.

use std::sync::atomic::{AtomicUsize, Ordering};

/// At most this many threads: beyond a few, discovery waits on the kernel's locks, not on CPUs.
const MAX_WORKERS: usize = 8;

/// Fewer items than this per extra thread are not worth starting it for.
const MIN_ITEMS_PER_WORKER: usize = 16;

/// `f` over `items` on up to `MAX_WORKERS` threads (as many as the machine has cores, this
/// one included), each taking the next item until none is left; results in the order of
/// `items`. A panic in `f` is a bug and is passed on unchanged.
pub fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    map_min(items, MIN_ITEMS_PER_WORKER, f)
}

/// The CPUs this process may run on (sched_getaffinity(2)), counted once. Not
/// `std::thread::available_parallelism`: that also reads the cgroup's CPU quota under
/// /sys/fs/cgroup and /proc/self/cgroup on every call, and a replay of a bundle or recorded
/// tree reads nothing of the host but the binary's own libraries. A quota does not
/// bound this work anyway: its threads mostly wait on the kernel's reads.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| {
        // SAFETY: an all-zero cpu_set_t is a valid empty set for the kernel to fill in.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: set is writable for the size we pass; pid 0 is this thread.
        let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
        if r != 0 {
            return 1;
        }
        // SAFETY: set was filled in by the kernel.
        (unsafe { libc::CPU_COUNT(&set) } as usize).max(1)
    })
}

/// `map` where `spread` (reads that wait on the kernel), a plain sequential map otherwise
/// (reads of a record in memory: another thread only costs its start).
pub fn map_if<T: Sync, R: Send>(spread: bool, items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if spread {
        map(items, f)
    } else {
        items.iter().map(f).collect()
    }
}

/// `map`, starting another thread for every `min_items` items (1: for few but large items).
pub fn map_min<T: Sync, R: Send>(
    items: &[T],
    min_items: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let workers = cores()
        .min(MAX_WORKERS)
        .min(items.len() / min_items.max(1))
        .max(1);
    if workers == 1 {
        return items.iter().map(&f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut out = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return out;
            };
            out.push((i, f(item)));
        }
    };
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
    std::thread::scope(|s| {
        let others: Vec<_> = (1..workers).map(|_| s.spawn(work)).collect();
        let mine = work();
        for (i, r) in others
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(v) => v,
                Err(p) => std::panic::resume_unwind(p),
            })
            .chain(mine)
        {
            slots[i] = Some(r);
        }
    });
    // Every index was taken exactly once.
    slots.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn keeps_order_and_every_item() {
        let items: Vec<usize> = (0..1000).collect();
        assert_eq!(
            super::map(&items, |i| i * 2),
            items.iter().map(|i| i * 2).collect::<Vec<_>>()
        );
        assert_eq!(super::map_min(&items[..3], 1, |i| *i), vec![0, 1, 2]);
        assert!(super::map(&[] as &[u8], |_| 0).is_empty());
    }
}
