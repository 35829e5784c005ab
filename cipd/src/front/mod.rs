//! The front-ends: the CIP stream service ([`service`]) over the framed transport
//! ([`crate::transport`]), the HTTP router ([`http`]) and its routes (CIP over HTTP in
//! [`cip_http`], RDM in [`rdm`], `/hina.di` in [`hinadi`], the console in [`console`], the mesh search in [`search`]),
//! the admin socket ([`admin`]), Whois++ queries on the CIP port that serves them too
//! ([`whoispp`]), the per-address connection limits they share ([`conn_limit`]), and budgeted request-body
//! reading ([`body`]).

pub mod admin;
pub mod api;
pub mod body;
pub mod cip_http;
pub mod conn_limit;
pub mod console;
pub mod hinadi;
pub mod http;
pub mod rdm;
pub mod search;
pub mod service;
pub mod whoispp;
