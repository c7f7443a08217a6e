//! The embedding endpoint: `POST {baseUrl}/embeddings` with `{"model", "input": [..]}`, as
//! OpenAI, OpenRouter and every OpenAI-compatible server take it; the answer's
//! `data[i].embedding` (ordered by `data[i].index`) must hold one vector of the configured
//! length per input. Vectors are returned normalised (unit length), so similarity is a dot
//! product.

use std::time::Duration;

use serde_json::{Value, json};

/// Why no vectors came back.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// Not reachable, or no answer in time.
    #[error("the embedding service is unreachable: {0}")]
    Unreachable(String),
    /// An error status.
    #[error("the embedding service answered HTTP {0}")]
    Status(u16),
    /// An answer that is not what the API promises (wrong count, wrong length, not numbers).
    #[error("the embedding service answered something unusable: {0}")]
    BadAnswer(String),
}

/// A client for one model.
#[derive(Debug, Clone)]
pub struct EmbeddingClient {
    http: reqwest::Client,
    url: String,
    key: Option<String>,
    model: String,
    dimensions: usize,
}

impl EmbeddingClient {
    /// A client of `{base_url}/embeddings` for `model` returning `dimensions`-long vectors.
    pub fn new(
        base_url: &str,
        key: Option<String>,
        model: &str,
        dimensions: usize,
        timeout: Duration,
    ) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("air-friends/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(EmbeddingClient {
            http,
            url: format!("{}/embeddings", base_url.trim_end_matches('/')),
            key: key.filter(|k| !k.is_empty()),
            model: model.to_owned(),
            dimensions,
        })
    }

    /// The model's name.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The length of its vectors.
    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// One normalised vector per text, in order.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut request = self
            .http
            .post(&self.url)
            .json(&json!({"model": self.model, "input": texts}));
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|e| EmbedError::Unreachable(without_url(&e)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(EmbedError::Status(status.as_u16()));
        }
        let body: Value = response
            .json()
            .await
            .map_err(|e| EmbedError::BadAnswer(without_url(&e)))?;
        parse(&body, texts.len(), self.dimensions)
    }
}

/// A client error's text without the URL (it may carry a key in a query string).
fn without_url(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "timed out".into();
    }
    if e.is_connect() {
        return "connection failed".into();
    }
    let text = e.to_string();
    match e.url() {
        Some(url) => text.replace(url.as_str(), "<url>"),
        None => text,
    }
}

fn parse(body: &Value, count: usize, dimensions: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    let bad = |why: String| EmbedError::BadAnswer(why);
    let data = body["data"]
        .as_array()
        .ok_or_else(|| bad("no data array".into()))?;
    if data.len() != count {
        return Err(bad(format!("{} vectors for {count} texts", data.len())));
    }
    let mut out: Vec<(usize, Vec<f32>)> = Vec::with_capacity(count);
    for (i, item) in data.iter().enumerate() {
        let index = item["index"].as_u64().map_or(i, |n| n as usize);
        let raw = item["embedding"]
            .as_array()
            .ok_or_else(|| bad("an item without an embedding".into()))?;
        if raw.len() != dimensions {
            return Err(bad(format!(
                "a vector of {} numbers, {dimensions} configured (memory.embeddings.dimensions)",
                raw.len()
            )));
        }
        let v: Option<Vec<f32>> = raw.iter().map(|x| x.as_f64().map(|f| f as f32)).collect();
        let v = v.ok_or_else(|| bad("a vector with something other than numbers".into()))?;
        out.push((
            index,
            normalise(v).ok_or_else(|| bad("a zero vector".into()))?,
        ));
    }
    out.sort_by_key(|(i, _)| *i);
    if out.iter().enumerate().any(|(i, (index, _))| i != *index) {
        return Err(bad("indexes do not cover the texts".into()));
    }
    Ok(out.into_iter().map(|(_, v)| v).collect())
}

/// `v` scaled to unit length (`None` for a zero or non-finite vector).
pub fn normalise(mut v: Vec<f32>) -> Option<Vec<f32>> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return None;
    }
    for x in &mut v {
        *x /= norm;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked_and_reordered_by_index() {
        let body = json!({"data": [
            {"index": 1, "embedding": [0.0, 2.0]},
            {"index": 0, "embedding": [3.0, 4.0]}
        ]});
        let v = parse(&body, 2, 2).unwrap();
        assert_eq!(v[0], vec![0.6, 0.8]);
        assert_eq!(v[1], vec![0.0, 1.0]);
        for (bad, count, dims) in [
            (json!({}), 1, 2),
            (json!({"data": [{"embedding": [1.0, 0.0]}]}), 2, 2),
            (json!({"data": [{"embedding": [1.0]}]}), 1, 2),
            (json!({"data": [{"embedding": ["a", 0.0]}]}), 1, 2),
            (json!({"data": [{"embedding": [0.0, 0.0]}]}), 1, 2),
            (
                json!({"data": [{"index": 5, "embedding": [1.0, 0.0]}]}),
                1,
                2,
            ),
        ] {
            assert!(
                matches!(parse(&bad, count, dims), Err(EmbedError::BadAnswer(_))),
                "{bad}"
            );
        }
    }
}
