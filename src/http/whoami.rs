//! `GET /whoami`: the namespace and role of the caller's API key (the
//! book's "API keys and namespaces" (docs/src/api-keys.md)).

use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::http::access::Caller;

/// The caller's namespace and role.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"namespace": "team-a", "role": "client"}))]
pub struct WhoAmI {
    /// The key's namespace; `null` on an open server (no API keys).
    pub namespace: Option<String>,
    /// `client` or `admin` (an open server: `admin`).
    #[schema(example = "client")]
    pub role: &'static str,
}

/// Who am I: the namespace and role of the request's API key.
///
/// Handy to check a client's configuration. On an open server (no API
/// keys configured) every request is an admin of the default namespace:
/// `{"namespace": null, "role": "admin"}`.
#[utoipa::path(
    get,
    path = "/whoami",
    operation_id = "get_whoami",
    tag = "access",
    responses((status = 200, description = "The caller's namespace and role", body = WhoAmI))
)]
pub async fn whoami(Caller(scope, role): Caller) -> Json<WhoAmI> {
    Json(WhoAmI {
        namespace: scope.namespace().map(str::to_string),
        role: role.as_str(),
    })
}
