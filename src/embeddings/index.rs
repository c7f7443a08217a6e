//! The vectors of recently searched workspaces, in memory: a search compares the query with
//! every vector of its workspace (an exact scan: at 100 000 memories of 384 dimensions a few
//! milliseconds, `docs/PERFORMANCE.md`, "Meaning-based recall"), so they are loaded from the
//! store once and kept, with vectors made later appended. The least recently searched
//! workspaces are dropped past [`MAX_CACHED_FLOATS`].

use crate::sync::{Recover, RecoverRw};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

/// Most `f32`s kept over all workspaces (256 MiB).
pub const MAX_CACHED_FLOATS: usize = 64 * 1024 * 1024;

/// One workspace's vectors: rows and their vectors laid end to end.
#[derive(Debug, Default)]
pub struct WorkspaceVectors {
    seqs: Vec<i64>,
    data: Vec<f32>,
}

impl WorkspaceVectors {
    /// Built from `(row, vector)` pairs of `dimensions` (others are skipped).
    pub fn from_rows(rows: Vec<(i64, Vec<f32>)>, dimensions: usize) -> Self {
        let mut w = WorkspaceVectors {
            seqs: Vec::with_capacity(rows.len()),
            data: Vec::with_capacity(rows.len() * dimensions),
        };
        for (seq, v) in rows {
            w.push(seq, &v, dimensions);
        }
        w
    }

    /// Appends a vector of the right length (rows from the store are unique).
    fn push(&mut self, seq: i64, v: &[f32], dimensions: usize) -> bool {
        if v.len() != dimensions {
            return false;
        }
        self.seqs.push(seq);
        self.data.extend_from_slice(v);
        true
    }

    /// Vectors held.
    pub fn len(&self) -> usize {
        self.seqs.len()
    }

    /// No vectors.
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// The `k` rows most similar to `query` (dot product of unit vectors, best first).
    pub fn nearest(&self, query: &[f32], k: usize) -> Vec<(i64, f32)> {
        let d = query.len();
        if d == 0 || k == 0 {
            return Vec::new();
        }
        let mut best: Vec<(i64, f32)> = Vec::with_capacity(k + 1);
        let mut floor = f32::NEG_INFINITY;
        for (seq, v) in self.seqs.iter().zip(self.data.chunks_exact(d)) {
            let sim = dot(v, query);
            if best.len() < k || sim > floor {
                let at = best.partition_point(|(_, s)| *s >= sim);
                best.insert(at, (*seq, sim));
                best.truncate(k);
                if best.len() == k {
                    floor = best[k - 1].1;
                }
            }
        }
        best
    }
}

/// The dot product of two equally long vectors, summed in eight independent lanes so the
/// compiler can use SIMD (a single running sum has to be added in order, one float at a
/// time); the lanes' order changes the result only in the last bits.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut acc = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// Cached workspaces, least recently used first in `order`.
#[derive(Debug, Default)]
struct Cache {
    by_ws: HashMap<String, Arc<RwLock<WorkspaceVectors>>>,
    order: Vec<String>,
    floats: usize,
}

/// The in-memory vectors. Cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct VectorIndex {
    cache: Arc<Mutex<Cache>>,
    dimensions: usize,
}

impl VectorIndex {
    /// An empty index of `dimensions`-long vectors.
    pub fn new(dimensions: usize) -> Self {
        VectorIndex {
            cache: Arc::default(),
            dimensions,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.locked()
    }

    /// The workspace's vectors when cached (marked as just used).
    pub fn get(&self, ws: &str) -> Option<Arc<RwLock<WorkspaceVectors>>> {
        let mut c = self.lock();
        let found = c.by_ws.get(ws).cloned()?;
        if let Some(i) = c.order.iter().position(|w| w == ws) {
            let w = c.order.remove(i);
            c.order.push(w);
        }
        Some(found)
    }

    /// Caches `vectors` for `ws` (replacing what was there), dropping the least recently used
    /// workspaces past the cap.
    pub fn insert(&self, ws: &str, vectors: WorkspaceVectors) -> Arc<RwLock<WorkspaceVectors>> {
        let floats = vectors.data.len();
        let entry = Arc::new(RwLock::new(vectors));
        let mut c = self.lock();
        if let Some(old) = c.by_ws.insert(ws.to_owned(), entry.clone()) {
            c.floats -= old.read_locked().data.len();
            c.order.retain(|w| w != ws);
        }
        c.order.push(ws.to_owned());
        c.floats += floats;
        while c.floats > MAX_CACHED_FLOATS && c.order.len() > 1 {
            let oldest = c.order.remove(0);
            if let Some(gone) = c.by_ws.remove(&oldest) {
                c.floats -= gone.read_locked().data.len();
            }
        }
        entry
    }

    /// Adds a new vector to its workspace when that is cached (else it is loaded with the
    /// rest at the next search).
    pub fn add(&self, ws: &str, seq: i64, v: &[f32]) {
        let mut c = self.lock();
        if let Some(entry) = c.by_ws.get(ws).cloned() {
            let mut w = entry.write_locked();
            if !w.seqs.contains(&seq) && w.push(seq, v, self.dimensions) {
                c.floats += v.len();
            }
        }
    }

    /// Vector length.
    pub fn dimensions(&self) -> usize {
        self.dimensions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn the_lane_wise_dot_product_matches_the_plain_one() {
        for n in [0usize, 1, 7, 8, 9, 384, 1001] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - plain).abs() < 1e-3, "{n}");
        }
    }

    #[test]
    fn nearest_returns_the_best_k_in_order() {
        let rows = vec![
            (1, unit(&[1.0, 0.0])),
            (2, unit(&[0.0, 1.0])),
            (3, unit(&[1.0, 1.0])),
            (4, unit(&[-1.0, 0.0])),
        ];
        let w = WorkspaceVectors::from_rows(rows, 2);
        let q = unit(&[1.0, 0.2]);
        let got: Vec<i64> = w.nearest(&q, 3).into_iter().map(|(s, _)| s).collect();
        assert_eq!(got, [1, 3, 2]);
        assert_eq!(w.nearest(&q, 10).len(), 4);
        assert!(w.nearest(&q, 0).is_empty());
    }

    #[test]
    fn cached_workspaces_grow_and_the_least_recent_is_dropped_first() {
        let index = VectorIndex::new(2);
        index.insert(
            "a",
            WorkspaceVectors::from_rows(vec![(1, unit(&[1.0, 0.0]))], 2),
        );
        index.add("a", 2, &unit(&[0.0, 1.0]));
        index.add("b", 3, &unit(&[0.0, 1.0]));
        assert_eq!(index.get("a").unwrap().read().unwrap().len(), 2);
        assert!(
            index.get("b").is_none(),
            "not cached: loaded at its first search"
        );
        // Wrong lengths and repeats are ignored.
        index.add("a", 4, &[1.0]);
        index.add("a", 2, &unit(&[0.0, 1.0]));
        assert_eq!(index.get("a").unwrap().read().unwrap().len(), 2);
    }
}
