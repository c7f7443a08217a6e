//! The conversation pipeline: which messages to answer and in what order (router, policy,
//! rate limit, the inbox that records each and survives restarts, the catch-up that reads back
//! what was sent while the daemon was away), the user workspaces, prompt assembly, starting an agent session (`launch`, shared
//! with the memory maintenance job), one interaction end to end, what a user is told when the
//! model could not answer, the agents kept warm between a conversation's turns and those started
//! ahead of its next message, and the turn of a scheduled run (the bot speaking first).

pub mod ahead;
pub mod catch_up;
pub mod context;
pub mod continuity;
pub mod inbox;
pub mod interaction;
pub mod launch;
pub mod metrics;
pub mod notices;
pub mod policy;
pub mod prompts;
pub mod ratelimit;
pub mod router;
pub mod scheduled;
pub mod threads;
pub mod warm;
pub mod workspace;

pub use launch::{AgentEnvTemplate, LaunchError, Launcher};
pub use metrics::ConversationMetrics;
pub use policy::{Ignore, Policy};
pub use ratelimit::UserRateLimiter;
pub use router::{Dispatch, MessageHandler, Router, RouterParts, RouterSettings};
