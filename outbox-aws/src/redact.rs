//! The HTTP client under the SDK clients cuts the session token out of error answers before the SDK reads
//! them. AWS echoes what a request carried when it refuses it: S3 puts the canonical request, headers and
//! all, in a `SignatureDoesNotMatch` answer and the token itself in `ExpiredToken`'s `Token-0`, and any
//! service may quote it in a message. The SDK traces every answer's body and headers, and the error message
//! goes into the job's row; redacted here, neither ever holds the token.
//!
//! The secret access key never travels (it only signs), so the session token is the one secret a server
//! can send back. Successful answers pass untouched: their bodies are the user's data, and may stream.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::{RuntimeComponents, RuntimeComponentsBuilder};
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::byte_stream::ByteStream;
use aws_smithy_types::config_bag::ConfigBag;

/// What a request header holding the session token is called.
const TOKEN_HEADER: &str = "x-amz-security-token";
const REDACTED: &[u8] = b"[redacted]";

/// `inner`, with the session token a request carried cut out of the body and headers of its error answer.
pub(crate) fn redacting(inner: SharedHttpClient) -> SharedHttpClient {
    SharedHttpClient::new(RedactingClient(inner))
}

#[derive(Debug)]
struct RedactingClient(SharedHttpClient);

impl HttpClient for RedactingClient {
    fn http_connector(&self, settings: &HttpConnectorSettings, components: &RuntimeComponents) -> SharedHttpConnector {
        SharedHttpConnector::new(Redacting(self.0.http_connector(settings, components)))
    }

    fn validate_base_client_config(
        &self,
        runtime_components: &RuntimeComponentsBuilder,
        cfg: &ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.validate_base_client_config(runtime_components, cfg)
    }

    fn validate_final_config(&self, runtime_components: &RuntimeComponents, cfg: &ConfigBag) -> Result<(), BoxError> {
        self.0.validate_final_config(runtime_components, cfg)
    }

    fn connector_metadata(&self) -> Option<aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata> {
        self.0.connector_metadata()
    }
}

#[derive(Debug)]
struct Redacting(SharedHttpConnector);

impl HttpConnector for Redacting {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        // Only values long enough to be a token: cutting out a short one would mangle innocent text.
        let token = request.headers().get(TOKEN_HEADER).filter(|t| t.len() >= 8).map(str::to_owned);
        let sent = self.0.call(request);
        HttpConnectorFuture::new(async move {
            let response = sent.await?;
            match token {
                Some(token) if !response.status().is_success() => redact(response, token.as_bytes()).await,
                _ => Ok(response),
            }
        })
    }
}

/// The response with `secret` replaced in its body and header values. Error bodies are small, and the SDK
/// reads them whole anyway.
async fn redact(mut response: HttpResponse, secret: &[u8]) -> Result<HttpResponse, ConnectorError> {
    let body = ByteStream::new(response.take_body()).collect().await.map_err(|e| ConnectorError::io(e.into()))?;
    // S3 also echoes the signed request as hex bytes (`<CanonicalRequestBytes>74 6f 6b ...`).
    let body = spelled(secret).iter().fold(body.into_bytes().to_vec(), |body, form| replace(&body, form));
    let length = body.len();
    *response.body_mut() = SdkBody::from(body);
    let headers = response.headers_mut();
    // The SDK holds a body to its announced length: announce the new one.
    if headers.get("content-length").is_some() {
        headers.remove("content-length");
        let _ = headers.try_insert("content-length", length.to_string());
    }
    let tainted: Vec<(String, Vec<u8>)> = headers
        .iter_bytes()
        .filter(|(_, value)| find(value, secret).is_some())
        .map(|(name, value)| (name.to_owned(), replace(value, secret)))
        .collect();
    for (name, value) in tainted {
        headers.remove(&name);
        // A value that is not text is dropped rather than kept whole.
        if let Ok(value) = String::from_utf8(value) {
            let _ = headers.try_insert(name, value);
        }
    }
    Ok(response)
}

/// `secret` as itself and as the hex bytes an error answer may spell it in.
fn spelled(secret: &[u8]) -> Vec<Vec<u8>> {
    let hex = |sep: &str, upper: bool| {
        let digits: Vec<String> =
            secret.iter().map(|b| if upper { format!("{b:02X}") } else { format!("{b:02x}") }).collect();
        digits.join(sep).into_bytes()
    };
    vec![secret.to_vec(), hex(" ", false), hex(" ", true), hex("", false), hex("", true)]
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `bytes` with every occurrence of `secret` replaced by `[redacted]`.
fn replace(bytes: &[u8], secret: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some(at) = find(rest, secret) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(REDACTED);
        rest = &rest[at + secret.len()..];
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occurrence_is_replaced() {
        assert_eq!(replace(b"a TOKEN b TOKENTOKEN", b"TOKEN"), b"a [redacted] b [redacted][redacted]");
        assert_eq!(replace(b"nothing here", b"TOKEN"), b"nothing here");
        assert_eq!(replace(b"", b"TOKEN"), b"");
    }

    #[test]
    fn hex_spellings_are_covered() {
        let forms = spelled(b"Tok");
        assert!(forms.contains(&b"54 6f 6b".to_vec()) && forms.contains(&b"546F6B".to_vec()), "{forms:?}");
    }
}
