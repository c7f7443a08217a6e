//! Meaning-based recall (`memory.embeddings`, optional). Each memory gets a vector from an
//! OpenAI-compatible `/embeddings` endpoint ([`client`]) in the background ([`Semantic::run`]
//! empties the store's queue; a save never waits for it, and imported memories are queued like
//! any other). memory-search then ranks by full-text rank and vector similarity together
//! (reciprocal rank fusion), still only over the workspace's enabled memories visible in the
//! conversation. With the service down or slow, search is exactly the full-text search, and
//! its answer says which mode was used ([`SearchMode`]).
//!
//! Vectors are compared by an exact scan of the workspace's vectors held in memory
//! ([`index`]); `docs/PERFORMANCE.md` ("Meaning-based recall") has its cost at 100 000
//! memories.

pub mod client;
pub mod index;

use crate::sync::RecoverRw;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::config::Config;
use crate::store::{Scope, ScoredMemory, Store, StoreError, WorkspaceKey};

pub use client::{EmbedError, EmbeddingClient};
pub use index::{VectorIndex, WorkspaceVectors};

/// The `k` of reciprocal rank fusion: a hit at rank r adds `1 / (K + r)`.
const RRF_K: f64 = 60.0;

/// Vector candidates per hit asked for.
const CANDIDATES_PER_HIT: usize = 4;

/// Similarity below which a vector neighbour is not a hit at all.
const MIN_SIMILARITY: f32 = 0.2;

/// How a search was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchMode {
    /// Full text and vectors, fused.
    Hybrid,
    /// Full text only: embeddings are off, or the service failed (the reason).
    FullText(Option<String>),
}

impl SearchMode {
    /// `hybrid` or `fulltext`.
    pub fn as_str(&self) -> &'static str {
        match self {
            SearchMode::Hybrid => "hybrid",
            SearchMode::FullText(_) => "fulltext",
        }
    }
}

/// The embedding service of the daemon. Cloning shares it.
#[derive(Debug, Clone)]
pub struct Semantic {
    client: EmbeddingClient,
    store: Store,
    index: VectorIndex,
    wake: Arc<Notify>,
    batch: u32,
}

/// Why embeddings could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("memory.embeddings: {0}")]
pub struct SetupError(String);

impl Semantic {
    /// The service `config` describes (`None` when `memory.embeddings` is unset); keys are read
    /// from `env`.
    pub fn from_config(
        config: &Config,
        store: Store,
        env: &impl crate::config::EnvSource,
    ) -> Result<Option<Self>, SetupError> {
        let Some(e) = &config.memory.embeddings else {
            return Ok(None);
        };
        let at = config
            .service_endpoint(&e.provider, &e.base_url, &e.api_key_env)
            .ok_or_else(|| SetupError(format!("{:?} is not one of agent.providers", e.provider)))?;
        let key = (!at.api_key_env.is_empty())
            .then(|| env.var(&at.api_key_env))
            .flatten();
        let client = EmbeddingClient::new(
            &at.base_url,
            key,
            &e.model,
            e.dimensions as usize,
            Duration::from_millis(e.timeout_ms),
        )
        .map_err(|err| SetupError(err.to_string()))?;
        Ok(Some(Self::new(client, store, e.batch_size)))
    }

    /// A service embedding with `client` into `store`, `batch` memories per request.
    pub fn new(client: EmbeddingClient, store: Store, batch: u32) -> Self {
        let dimensions = client.dimensions();
        Semantic {
            client,
            store,
            index: VectorIndex::new(dimensions),
            wake: Arc::new(Notify::new()),
            batch: batch.max(1),
        }
    }

    /// Tells the background job new memories are queued.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Searches `ws` by meaning and fuses the result with the full-text `hits` (best first).
    /// Any failure of the embedding service leaves the full-text hits as they are, with the
    /// reason.
    pub async fn search(
        &self,
        ws: &WorkspaceKey,
        query: &str,
        scope: Scope,
        limit: usize,
        hits: Vec<ScoredMemory>,
    ) -> (Vec<ScoredMemory>, SearchMode) {
        match self.neighbours(ws, query, scope, limit).await {
            Ok(near) => (fuse(hits, near, limit), SearchMode::Hybrid),
            Err(reason) => {
                tracing::warn!(reason = %reason, "memory-search fell back to full text");
                (hits, SearchMode::FullText(Some(reason)))
            }
        }
    }

    async fn neighbours(
        &self,
        ws: &WorkspaceKey,
        query: &str,
        scope: Scope,
        limit: usize,
    ) -> Result<Vec<ScoredMemory>, String> {
        let q = self
            .client
            .embed(&[query.to_owned()])
            .await
            .map_err(|e| e.to_string())?
            .pop()
            .ok_or("no vector for the query")?;
        let vectors = self.vectors_of(ws).await.map_err(|e| e.to_string())?;
        let k = (limit * CANDIDATES_PER_HIT).max(16);
        let near = tokio::task::spawn_blocking(move || vectors.read_locked().nearest(&q, k))
            .await
            .map_err(|e| e.to_string())?;
        let near: Vec<(i64, f32)> = near
            .into_iter()
            .filter(|(_, s)| *s >= MIN_SIMILARITY)
            .collect();
        let sims: HashMap<i64, f32> = near.iter().copied().collect();
        let found = self
            .store
            .memories_by_seq(ws, near.iter().map(|(s, _)| *s).collect(), scope)
            .await
            .map_err(|e| e.to_string())?;
        Ok(found
            .into_iter()
            .map(|(seq, memory)| ScoredMemory {
                memory,
                score: f64::from(sims.get(&seq).copied().unwrap_or(0.0)),
            })
            .collect())
    }

    async fn vectors_of(
        &self,
        ws: &WorkspaceKey,
    ) -> Result<Arc<std::sync::RwLock<WorkspaceVectors>>, StoreError> {
        let key = ws.to_string();
        if let Some(cached) = self.index.get(&key) {
            return Ok(cached);
        }
        let rows = self
            .store
            .workspace_vectors(ws, self.client.model())
            .await?;
        let dims = self.index.dimensions();
        let built = tokio::task::spawn_blocking(move || WorkspaceVectors::from_rows(rows, dims))
            .await
            .unwrap_or_default();
        Ok(self.index.insert(&key, built))
    }

    /// The background job: re-queues vectors of another model, then embeds queued memories
    /// batch by batch, waiting for [`wake`](Self::wake) (or a minute) when the queue is empty
    /// and backing off while the service fails, until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        match self
            .store
            .requeue_other_model_vectors(self.client.model())
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                memories = n,
                model = self.client.model(),
                "embedding model changed; memories queued again"
            ),
            Err(e) => tracing::warn!(error = %e, "could not check the stored vectors' model"),
        }
        let retries = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
        let mut failures = 0u32;
        loop {
            if stop.is_cancelled() {
                return;
            }
            let wait = match self.step().await {
                Ok(0) => {
                    failures = 0;
                    Some(Duration::from_secs(60))
                }
                Ok(_) => {
                    failures = 0;
                    None
                }
                Err(e) => {
                    let wait = retries.ceiling(failures);
                    failures = failures.saturating_add(1);
                    tracing::warn!(error = %e, retry_in_s = wait.as_secs(), "could not embed memories");
                    Some(wait)
                }
            };
            if let Some(wait) = wait {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = self.wake.notified() => {}
                    _ = stop.cancelled() => return,
                }
            }
        }
    }

    /// Embeds one batch of the queue; returns how many memories got a vector.
    pub async fn step(&self) -> Result<usize, String> {
        let pending = self
            .store
            .embedding_queue(self.batch)
            .await
            .map_err(|e| e.to_string())?;
        if pending.is_empty() {
            return Ok(0);
        }
        let texts: Vec<String> = pending.iter().map(|p| p.content.clone()).collect();
        let vectors = self.client.embed(&texts).await.map_err(|e| e.to_string())?;
        let rows: Vec<(i64, Vec<f32>)> = pending
            .iter()
            .zip(vectors)
            .map(|(p, v)| (p.seq, v))
            .collect();
        self.store
            .put_vectors(self.client.model(), rows.clone())
            .await
            .map_err(|e| e.to_string())?;
        for (p, (seq, v)) in pending.iter().zip(&rows) {
            self.index.add(&p.workspace, *seq, v);
        }
        Ok(rows.len())
    }
}

/// Reciprocal rank fusion of the full-text `hits` and the vector neighbours `near` (both best
/// first): each memory scores `Σ 1 / (K + rank)` over the lists it is in; best `limit`.
pub fn fuse(hits: Vec<ScoredMemory>, near: Vec<ScoredMemory>, limit: usize) -> Vec<ScoredMemory> {
    let mut scored: HashMap<String, ScoredMemory> = HashMap::new();
    for list in [hits, near] {
        for (rank, hit) in list.into_iter().enumerate() {
            let add = 1.0 / (RRF_K + rank as f64 + 1.0);
            scored
                .entry(hit.memory.id.clone())
                .and_modify(|s| s.score += add)
                .or_insert(ScoredMemory {
                    memory: hit.memory,
                    score: add,
                });
        }
    }
    let mut out: Vec<ScoredMemory> = scored.into_values().collect();
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| b.memory.created_at.cmp(&a.memory.created_at))
    });
    out.truncate(limit);
    out
}
