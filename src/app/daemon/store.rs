//! The database stage: the store opened (its folder created first) and, when
//! `memory.embeddings` is configured, the embedding service that fills its vector queue.

use anyhow::Context;

use super::Ctx;
use crate::config::{Config, ProcessEnv};
use crate::embeddings::Semantic;
use crate::store::Store;
use crate::store::owner::OwnerLock;

/// The database, its folder created first, and the daemon's lock on it (a second daemon on
/// the same database, or a restore underneath this one, is refused while it is held).
pub(super) async fn open(config: &Config) -> anyhow::Result<(Store, OwnerLock)> {
    let db_path = config.database_path();
    if let Some(parent) = db_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(parent)
            .await
            .with_context(|| format!("cannot create the data folder {}", parent.display()))?;
    }
    let owner = OwnerLock::acquire(&db_path)?;
    let store = Store::open(&db_path)
        .await
        .with_context(|| format!("cannot open the database {}", db_path.display()))?;
    Ok((store, owner))
}

/// `memory.embeddings`: the service (its background job started, the store's queue turned on),
/// or `None` with the queue off.
pub(super) async fn start_embeddings(ctx: Ctx<'_>) -> anyhow::Result<Option<Semantic>> {
    let semantic = Semantic::from_config(ctx.config, ctx.store.clone(), &ProcessEnv)?;
    ctx.store
        .set_embedding_queue(semantic.is_some())
        .await
        .context("cannot set up the embedding queue")?;
    if let Some(job) = semantic.clone() {
        let draining = ctx.shutdown.draining();
        ctx.shutdown.spawn("embeddings", async move {
            job.run(draining).await;
            Ok(())
        });
    }
    Ok(semantic)
}
