//! A loopback HTTP server serving files, as a platform's file host does, for tests that fetch
//! attachments without a whole fake platform.
#![allow(dead_code)]

use std::sync::Arc;

/// A loopback HTTP server answering `GET /files/{name}` with the given files; returns its
/// `127.0.0.1:PORT`.
pub async fn serve_files(files: Vec<(&'static str, &'static str, Vec<u8>)>) -> String {
    use axum::extract::Path as UrlPath;
    use axum::response::IntoResponse;
    let files = Arc::new(files);
    let app = axum::Router::new().route(
        "/files/{name}",
        axum::routing::get(move |UrlPath(name): UrlPath<String>| {
            let files = files.clone();
            async move {
                match files.iter().find(|(n, _, _)| *n == name) {
                    Some((_, mime, bytes)) => {
                        ([("content-type", *mime)], bytes.clone()).into_response()
                    }
                    None => axum::http::StatusCode::NOT_FOUND.into_response(),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}
