//! The checked-in OpenAPI document (docs/openapi.json) is the one the code generates, and
//! docs/HTTP.md's table names every error code with its status: neither can drift.

use std::path::PathBuf;

fn docs(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("docs")
        .join(name)
}

#[test]
fn the_checked_in_openapi_document_is_the_generated_one() {
    let generated = dq_http::openapi_json();
    let path = docs("openapi.json");
    if std::env::var_os("DQ_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).expect("write docs/openapi.json");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "docs/openapi.json differs from the document the code generates; regenerate it with\n\
         \n    DQ_UPDATE_OPENAPI=1 cargo test -p dq-http --test openapi_doc\n\n\
         and commit it"
    );
}

#[test]
fn the_guide_lists_every_error_code_with_its_status() {
    let guide = std::fs::read_to_string(docs("HTTP.md")).expect("docs/HTTP.md");
    for code in dq_http::Code::ALL {
        let row = format!("| `{}` | {} |", code.as_str(), code.status().as_u16());
        assert!(
            guide.contains(&row),
            "docs/HTTP.md's error table has no row starting {row:?}"
        );
    }
}

#[test]
fn the_document_describes_every_route() {
    let doc = dq_http::openapi();
    let paths: Vec<&String> = doc.paths.paths.keys().collect();
    for p in [
        "/v1/topics/{topic}/jobs",
        "/v1/topics/{topic}/jobs/bulk",
        "/v1/topics/{topic}/jobs/{key}",
        "/v1/topics/{topic}/jobs/{key}/reschedule",
        "/v1/topics/{topic}/jobs/{key}/bury",
        "/v1/topics/{topic}/dead/requeue",
        "/v1/topics/{topic}/limits",
        "/v1/topics/{topic}/groups",
        "/v1/topics/{topic}/groups/{group}",
        "/v1/topics/{topic}/groups/{group}/hold",
        "/v1/schedules/{name}",
        "/v1/batches",
        "/v1/batches/{id}",
        "/v1/batches/{id}/members",
        "/v1/batches/{id}/close",
        "/v1/batches/{id}/cancel",
    ] {
        assert!(
            paths.iter().any(|q| q.as_str() == p),
            "{p} missing: {paths:?}"
        );
    }
}
