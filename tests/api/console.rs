//! The operator console (`/console`): the page and every asset it refers
//! to are served by the binary, without a key, under a same-origin
//! Content-Security-Policy. What the page shows is driven in a browser by
//! tests/browser/console.test.mjs.

use reqwest::Url;
use reqwest::header::HeaderMap;

use crate::helpers::*;

/// The `src` and `href` values of `html`, in order.
fn references(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    for attribute in [" src=\"", " href=\""] {
        for (at, _) in html.match_indices(attribute) {
            let rest = &html[at + attribute.len()..];
            let end = rest.find('"').expect("a closed attribute value");
            found.push(rest[..end].to_string());
        }
    }
    found
}

/// The security headers every console response carries.
fn assert_locked_down(headers: &HeaderMap, what: &str) {
    let csp = headers["content-security-policy"].to_str().unwrap();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{what}: {directive} in {csp}");
    }
    assert!(!csp.contains("unsafe"), "{what}: {csp}");
    assert_eq!(headers["x-content-type-options"], "nosniff", "{what}");
}

#[tokio::test]
async fn the_console_page_and_the_assets_it_references_are_served_without_a_key() {
    let redis = redis();
    // With a key configured: the page itself stays open (its data calls
    // carry the key the operator gives it).
    let app = spawn_app(Config {
        api_keys: vec![format!("ns:admin:{}", "0".repeat(64))],
        ..test_config(&redis)
    })
    .await;
    let page_url = Url::parse(&app.url("/console")).unwrap();
    let page = app.client.get(page_url.clone()).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    assert_locked_down(page.headers(), "/console");
    let html = page.text().await.unwrap();
    assert!(html.contains("<title>latchkey console</title>"), "{html}");
    // No inline script or style: the policy would refuse them.
    assert!(
        !html.contains("<script>") && !html.contains(" style="),
        "{html}"
    );

    let mut assets = Vec::new();
    for reference in references(&html) {
        let url = page_url.join(&reference).unwrap();
        assert_eq!(
            url.origin(),
            page_url.origin(),
            "{reference}: nothing from another host"
        );
        let answer = app.client.get(url.clone()).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{url}");
        assert_locked_down(answer.headers(), url.path());
        let content_type = answer.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        let body = answer.text().await.unwrap();
        assert!(!body.is_empty(), "{url}");
        assets.push((url.path().to_string(), content_type, body));
    }
    let kinds: Vec<&str> = assets.iter().map(|(_, kind, _)| kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "text/javascript; charset=utf-8",
            "image/svg+xml",
            "text/css; charset=utf-8"
        ],
        "the page's script, icon and style sheet: {assets:?}"
    );
    // The script puts what the API says on the page as text only.
    let (_, _, script) = &assets[0];
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
    ] {
        assert!(!script.contains(sink), "the console's script uses {sink}");
    }
}
