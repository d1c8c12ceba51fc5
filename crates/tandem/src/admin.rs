//! The admin endpoint: `GET /metrics` (Prometheus text format) and `GET /health`.

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::net::SocketAddr;
use std::sync::Arc;
use tandem_container::Container;

pub async fn serve(
    addr: SocketAddr,
    container: Arc<Container>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = Router::new().route("/health", get(|| async { "ok\n" })).route(
        "/metrics",
        get(move || {
            let container = container.clone();
            async move { ([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], container.metrics_text()).into_response() }
        }),
    );
    let task = tokio::spawn(async move {
        let mut shutdown = shutdown;
        let served = axum::serve(listener, app).with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        });
        if let Err(e) = served.await {
            tracing::warn!(error = %e, "admin endpoint stopped");
        }
    });
    Ok((local, task))
}
