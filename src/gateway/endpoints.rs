//! The gateway's allow-list: the only requests it forwards are the ones a chat agent makes.
//!
//! A provider's API does far more than chat with the operator's key — list, upload and delete
//! files, start fine-tuning jobs, generate images, manage batches — and a hijacked agent would
//! reach all of it through an open proxy. So the gateway forwards exactly these, the same for
//! every provider, and answers 404 to anything else before a key is attached:
//!
//! | method | path (after `/llm/<session>/<provider>/`) | who sends it |
//! |---|---|---|
//! | `POST` | `chat/completions` | OpenAI-compatible providers (`@ai-sdk/openai-compatible`, OpenRouter's SDK, most OpenCode Zen models) |
//! | `POST` | `responses` | OpenAI's Responses API (`@ai-sdk/openai`: the `openai` provider, Zen's GPT models) |
//! | `POST` | `messages` | Anthropic's Messages API (`@ai-sdk/anthropic`: the `anthropic` provider, Zen's Claude models) |
//! | `GET` | `models` | the model list |
//!
//! The paths are relative to the provider's `baseUrl`, which OpenCode's SDKs get as their
//! base URL on the gateway; Anthropic's SDK, for one, sends `{baseURL}/messages`, so with the
//! built-in `https://api.anthropic.com/v1` the upstream sees `POST /v1/messages`. The path is
//! compared exactly, byte for byte as it arrived (still percent-encoded), after the checks that
//! keep it under the base URL: no prefix matching, no case folding, no decoding, a trailing
//! slash is another path, and an allowed path with a query (even an empty one) is refused —
//! OpenCode's SDKs send none, and a query is one more thing the upstream would interpret.

use axum::http::Method;

/// One allowed endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST chat/completions`.
    ChatCompletions,
    /// `POST responses`.
    Responses,
    /// `POST messages`.
    Messages,
    /// `GET models`.
    Models,
}

impl Endpoint {
    /// Every allowed endpoint.
    pub const ALL: [Endpoint; 4] = [
        Endpoint::ChatCompletions,
        Endpoint::Responses,
        Endpoint::Messages,
        Endpoint::Models,
    ];

    /// Its method.
    pub fn method(self) -> Method {
        match self {
            Endpoint::Models => Method::GET,
            _ => Method::POST,
        }
    }

    /// Its path relative to the provider's base URL.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat/completions",
            Endpoint::Responses => "responses",
            Endpoint::Messages => "messages",
            Endpoint::Models => "models",
        }
    }

    /// The endpoint `method` and `rest` (the raw path after the provider id) name, when it is
    /// allowed and `query` is absent; `None` otherwise.
    pub fn find(method: &Method, rest: &str, query: Option<&str>) -> Option<Endpoint> {
        if query.is_some() {
            return None;
        }
        Self::ALL
            .into_iter()
            .find(|e| e.method() == *method && e.path() == rest)
    }

    /// Whether its answer is a model call, whose tokens are charged (an estimate when the
    /// answer reports none).
    pub fn is_model_call(self) -> bool {
        self != Endpoint::Models
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_method_and_path_are_found() {
        for e in Endpoint::ALL {
            assert_eq!(Endpoint::find(&e.method(), e.path(), None), Some(e));
        }
        let refused = [
            (Method::GET, "chat/completions", None),
            (Method::POST, "chat/completions/", None),
            (Method::POST, "chat/completions", Some("")),
            (Method::POST, "chat/completions", Some("a=1")),
            (Method::POST, "/chat/completions", None),
            (Method::POST, "CHAT/completions", None),
            (Method::POST, "chat/complet%69ons", None),
            (Method::POST, "v1/messages", None),
            (Method::GET, "models/gpt-4o", None),
            (Method::GET, "files", None),
            (Method::DELETE, "files/x", None),
            (Method::POST, "fine_tuning/jobs", None),
            (Method::POST, "images/generations", None),
        ];
        for (method, rest, query) in refused {
            assert_eq!(
                Endpoint::find(&method, rest, query),
                None,
                "{method} {rest}"
            );
        }
    }
}
