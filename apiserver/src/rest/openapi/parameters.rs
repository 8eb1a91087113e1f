//! The query and path parameters of the operations, described as Kubernetes' documents
//! describe them. Each operation carries its own inline, as kubectl looks for them there.

use serde_json::{Value, json};

fn query(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": schema})
}

fn string() -> Value {
    json!({"type": "string", "uniqueItems": true})
}

fn boolean() -> Value {
    json!({"type": "boolean", "uniqueItems": true})
}

fn integer() -> Value {
    json!({"type": "integer", "uniqueItems": true})
}

pub(super) fn pretty() -> Value {
    query(
        "pretty",
        "If 'true', the output is pretty printed.",
        string(),
    )
}

fn dry_run() -> Value {
    query(
        "dryRun",
        "When present, indicates that modifications should not be persisted. The only valid value is 'All': all dry run stages are processed.",
        string(),
    )
}

fn field_manager() -> Value {
    query(
        "fieldManager",
        "A name associated with the actor or entity that is making these changes; at most 128 printable characters.",
        string(),
    )
}

fn field_validation() -> Value {
    query(
        "fieldValidation",
        "How the server treats unknown or duplicate fields in the request: Ignore drops them silently, Warn drops them and returns a warning for each, Strict fails the request on the first one.",
        string(),
    )
}

pub(super) fn write_parameters() -> Vec<Value> {
    vec![dry_run(), field_manager(), field_validation()]
}

fn selection_parameters() -> Vec<Value> {
    vec![
        query(
            "continue",
            "The continue token of the previous page of a paginated list.",
            string(),
        ),
        query(
            "fieldSelector",
            "A selector restricting the list of returned objects by their fields. Defaults to everything.",
            string(),
        ),
        query(
            "labelSelector",
            "A selector restricting the list of returned objects by their labels. Defaults to everything.",
            string(),
        ),
        query(
            "limit",
            "The maximum number of objects to return; more are signalled by a continue token in the list's metadata.",
            integer(),
        ),
        query(
            "resourceVersion",
            "The resource version the list is served at, with resourceVersionMatch deciding how it is matched; for a watch, the version to start after. Unset means most recent.",
            string(),
        ),
        query(
            "resourceVersionMatch",
            "How resourceVersion applies to list calls: Exact or NotOlderThan.",
            string(),
        ),
        query(
            "sendInitialEvents",
            "With watch=true, begin the watch stream with synthetic ADDED events for the current state of the objects, then a bookmark.",
            boolean(),
        ),
        query(
            "timeoutSeconds",
            "A timeout for the list or watch call, regardless of activity.",
            integer(),
        ),
    ]
}

pub(super) fn list_parameters() -> Vec<Value> {
    let mut parameters = vec![query(
        "allowWatchBookmarks",
        "Ask for BOOKMARK watch events, which carry only the resource version reached.",
        boolean(),
    )];
    parameters.extend(selection_parameters());
    parameters.push(query(
        "watch",
        "Watch for changes to the described resources and return them as a stream of add, update and remove notifications.",
        boolean(),
    ));
    parameters
}

pub(super) fn delete_parameters() -> Vec<Value> {
    vec![
        dry_run(),
        query(
            "gracePeriodSeconds",
            "The duration in seconds before the object should be deleted; zero means immediately. Unset uses the kind's default.",
            integer(),
        ),
        query(
            "propagationPolicy",
            "Whether and how garbage collection is performed: Orphan, Background or Foreground.",
            string(),
        ),
    ]
}

pub(super) fn delete_collection_parameters() -> Vec<Value> {
    let mut parameters = delete_parameters();
    parameters.extend(selection_parameters());
    parameters
}

pub(super) fn log_parameters() -> Vec<Value> {
    vec![
        query(
            "container",
            "The container whose logs to stream; may be omitted when the pod has one container.",
            string(),
        ),
        query("follow", "Follow the log stream of the pod.", boolean()),
        query(
            "limitBytes",
            "The number of bytes to read from the server before terminating the log output.",
            integer(),
        ),
        query(
            "previous",
            "Return the logs of the previous, terminated instance of the container.",
            boolean(),
        ),
        query(
            "sinceSeconds",
            "Only return logs newer than this many seconds before the present.",
            integer(),
        ),
        query(
            "tailLines",
            "The number of lines from the end of the logs to show.",
            integer(),
        ),
        query(
            "timestamps",
            "Prefix every line of log output with an RFC3339 timestamp.",
            boolean(),
        ),
    ]
}

pub(super) fn path_parameter(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "description": description,
        "required": true,
        "schema": string(),
    })
}

pub(super) fn namespace_parameter() -> Value {
    path_parameter(
        "namespace",
        "object name and auth scope, such as for teams and projects",
    )
}
