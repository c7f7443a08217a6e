//! A Skill API answer read whole (status, headers, JSON body) with the checks every test makes
//! of it: the `data` of a success, the `code` of a failure. Shared by `skill_api_support` and
//! `handlers_support` (which includes this file by path).
#![allow(dead_code)]

use axum::http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;

#[derive(Debug)]
pub struct SkillResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl SkillResponse {
    /// Reads the whole response (so a pending termination fires); panics unless the body is
    /// JSON.
    pub async fn read(response: axum::response::Response) -> Self {
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "response is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&bytes)
            )
        });
        Self {
            status,
            headers,
            body,
        }
    }

    /// The `data` of a success; panics with the body otherwise.
    pub fn data(&self) -> &Value {
        assert_eq!(self.status, StatusCode::OK, "{:#}", self.body);
        &self.body["data"]
    }

    /// Asserts the failure shape (`success: false`, a non-empty `error`) and returns the code.
    pub fn code(&self) -> &str {
        assert_eq!(self.body["success"], false, "{:#}", self.body);
        assert!(
            self.body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{:#}",
            self.body
        );
        self.body["code"].as_str().expect("code")
    }

    /// The error code of a failure, after checking the status and the failure shape.
    pub fn error(&self, status: u16) -> &str {
        assert_eq!(self.status.as_u16(), status, "{:#}", self.body);
        self.code()
    }

    /// The `error` message of a failure (empty when there is none).
    pub fn message(&self) -> &str {
        self.body["error"].as_str().unwrap_or_default()
    }
}
