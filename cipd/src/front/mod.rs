//! The front-ends: the CIP stream service ([`service`]) over the framed transport
//! ([`crate::transport`]), the HTTP router ([`http_server`]) and its routes (CIP over HTTP in
//! [`cip_http`], RDM in [`rdm_server`], `/hina.di` in [`hinadi_server`], the console in [`console`], the mesh search in [`search_route`]),
//! the admin socket ([`admin`]), Whois++ queries on the CIP port that serves them too
//! ([`whoispp`]), the per-address connection limits they share ([`conn_limit`]), and budgeted request-body
//! reading ([`body`]).

pub mod admin;
pub mod api;
pub mod body;
pub mod cip_http;
pub mod conn_limit;
pub mod console;
pub mod hinadi_server;
pub mod http_server;
pub mod rdm_server;
pub mod search_route;
pub mod service;
pub mod whoispp;
