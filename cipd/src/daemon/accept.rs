//! The plain and TLS CIP accept loop: connection slots, refusals and one task per connection.

use std::sync::Arc;
use std::time::Duration;

use crate::front::conn_limit::{CIP_BUSY, ConnLimiter};
use crate::front::service::CipService;
use crate::front::whoispp::WhoisService;
use crate::node::Node;
use crate::sys::net::{Accepted, Bound};
use crate::transport::{
    ConnHooks, PeerContext, serve_shared_connection, serve_tracked_connection, tls_accept,
    transport_config,
};

pub(super) async fn accept_loop(
    node: Arc<Node>,
    listener: Bound,
    tls_config: Option<Arc<rustls::ServerConfig>>,
    service: Arc<CipService>,
    whois: Option<Arc<WhoisService>>,
    permits: Arc<ConnLimiter>,
) {
    let token = node.token.child_token();
    let transport = transport_config(&node.config());
    loop {
        let (stream, remote) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors and similar: pause instead of spinning.
                    tracing::warn!(error = %e, "cip accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = token.cancelled() => break,
        };
        // Closed by its peer already (a connect/close flood): not worth a slot or a task.
        if let Accepted::Tcp(s) = &stream
            && crate::front::conn_limit::peer_gone(s)
        {
            permits.note_gone();
            continue;
        }
        // Never wait for a slot: refuse at once and go on accepting. Plain CIP gets the
        // temporary-failure line; TLS is closed without an answer (no handshake spent).
        let permit = match permits.try_acquire(Some(remote.ip())) {
            Ok(p) => p,
            Err(why) => {
                let answer = tls_config.is_none().then_some(CIP_BUSY);
                match stream {
                    Accepted::Tcp(s) => {
                        permits.refuse(s, remote, why, answer, &node.tracker, &token);
                    }
                    // A simulated network's connection is closed without an answer.
                    Accepted::Net(_) => permits.note_refusal(Some(remote), why),
                }
                continue;
            }
        };
        // The first request's deadlines shrink as the slots fill (see conn_limit).
        let mut transport = transport.clone();
        transport.banner_timeout = permits.deadline(transport.banner_timeout);
        transport.negotiation_timeout = permits.deadline(transport.negotiation_timeout);
        let handshake = permits.deadline(transport.connect_timeout);
        let node_budget = node.inflight().clone();
        let (service, token, tls_config, whois) = (
            service.clone(),
            token.clone(),
            tls_config.clone(),
            whois.clone(),
        );
        let span = tracing::info_span!("cip", %remote);
        node.tracker.spawn(tracing::Instrument::instrument(
            async move {
                if let Accepted::Tcp(s) = &stream {
                    let _ = s.set_nodelay(true);
                }
                let activity = permit.activity();
                let hooks = ConnHooks {
                    activity: Some(&activity),
                    budget: Some(&node_budget),
                };
                let serve = async {
                    match tls_config {
                        None => {
                            let ctx = PeerContext {
                                remote,
                                tls_peer_certificates: None,
                            };
                            match &whois {
                                // Each way boxed: the task holds only the one it
                                // takes (a TLS connection's state alone is kilobytes).
                                Some(w) => {
                                    Box::pin(serve_shared_connection(
                                        stream,
                                        ctx,
                                        service.as_ref(),
                                        w.as_ref(),
                                        &transport,
                                        token,
                                        hooks,
                                    ))
                                    .await
                                }
                                None => {
                                    Box::pin(serve_tracked_connection(
                                        stream,
                                        ctx,
                                        service.as_ref(),
                                        &transport,
                                        token,
                                        hooks,
                                    ))
                                    .await
                                }
                            }
                        }
                        Some(cfg) => {
                            Box::pin(async move {
                                match tls_accept::accept(cfg, stream, handshake).await {
                                    Ok((tls_stream, certs)) => {
                                        let ctx = PeerContext {
                                            remote,
                                            tls_peer_certificates: certs,
                                        };
                                        serve_tracked_connection(
                                            tls_stream,
                                            ctx,
                                            service.as_ref(),
                                            &transport,
                                            token,
                                            hooks,
                                        )
                                        .await
                                    }
                                    Err(e) => Err(e),
                                }
                            })
                            .await
                        }
                    }
                };
                // Evicted for a new connection: the connection is dropped (closed) at once.
                let result = tokio::select! {
                    r = serve => r,
                    () = permit.evicted() => {
                        tracing::debug!("cip connection evicted for a new one");
                        Ok(())
                    }
                };
                drop(permit);
                if let Err(e) = result {
                    tracing::debug!(error = %e, "cip connection ended with an error");
                }
            },
            span,
        ));
    }
}
