//! Model lists: `GET /v1/models` (OpenAI, Ollama, LM Studio, vLLM) and Ollama's
//! `GET /api/tags`, normalized to model ids.

use serde_json::Value;

/// Why a body is not a model list.
#[derive(Debug, thiserror::Error)]
pub enum ModelListError {
    /// The body is not JSON.
    #[error("model list is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// The server answered with an error object.
    #[error("server error: {0}")]
    Upstream(String),
    /// JSON, but neither `{"data": [...]}` nor `{"models": [...]}`.
    #[error("not a model list")]
    NotAList,
}

/// The model ids of a model list body, in the server's order:
///
/// - `{"object": "list", "data": [{"id": …}, …]}` (OpenAI, vLLM, Ollama's `/v1/models`,
///   LM Studio's without `created`); `"data": null` (Ollama with no model) is empty;
/// - `{"models": [{"name": …}, …]}` (Ollama's `/api/tags`; `model` when `name` is absent);
/// - a single model object `{"id": …, "object": "model"}` (`/v1/models/{id}`);
/// - `{"error": …}` is [`ModelListError::Upstream`].
pub fn model_ids(body: &[u8]) -> Result<Vec<String>, ModelListError> {
    let value: Value = serde_json::from_slice(body)?;
    if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| error.as_str().map(str::to_owned))
            .unwrap_or_else(|| error.to_string());
        return Err(ModelListError::Upstream(message));
    }
    let (items, keys): (_, &[&str]) = match (&value, value.get("data"), value.get("models")) {
        (_, Some(data), _) => (data, &["id", "name", "model"]),
        (_, None, Some(models)) => (models, &["name", "model", "id"]),
        (Value::Array(_), None, None) => (&value, &["id", "name", "model"]),
        (Value::Object(obj), None, None) => {
            return match obj.get("id").and_then(Value::as_str) {
                Some(id) => Ok(vec![id.to_owned()]),
                None => Err(ModelListError::NotAList),
            };
        }
        _ => return Err(ModelListError::NotAList),
    };
    match items {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => Ok(items
            .iter()
            .filter_map(|item| match item {
                Value::String(id) => Some(id.clone()),
                Value::Object(obj) => keys
                    .iter()
                    .find_map(|k| obj.get(*k).and_then(Value::as_str))
                    .map(str::to_owned),
                _ => None,
            })
            .collect()),
        _ => Err(ModelListError::NotAList),
    }
}
