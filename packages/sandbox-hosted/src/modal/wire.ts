/**
 * The subset of Modal's gRPC messages that the `modal` SDK (0.11.1) sends and reads for sandboxes, as a
 * protobufjs schema: the provider decodes a rate limit's `grpc-status-details-bin` with it, and the
 * package's Modal stand-in speaks both services with it. Only field numbers and types matter on the wire;
 * unused fields are left out (protobuf skips unknown fields).
 *
 * Field numbers from modal-labs/modal-client at 69519aef4cf6a3378314e3e7b91e87429490ed2a,
 * `modal_proto/api.proto` (package `modal.client`) and `modal_proto/task_command_router.proto` (package
 * `modal.task_command_router`). `SecretSource` and the two `secret_sources` fields (how the SDK sends
 * `env`) are newer than that commit: their numbers are read from the generated encoders shipped in the
 * `modal` 0.11.1 package. `Any` is `google.protobuf.Any`, declared here under Modal's package (the wire does
 * not carry message names).
 */
import protobuf from 'protobufjs';

const CLIENT = `
syntax = "proto3";
package modal.client;
message Any { string type_url = 1; bytes value = 2; }
message RPCStatus { int32 code = 1; string message = 2; repeated Any details = 3; }
message RPCRetryPolicy { float retry_after_secs = 1; }
message Empty {}
message AuthTokenGetResponse { string token = 1; }
message AppGetOrCreateRequest { string app_name = 1; string environment_name = 2; int32 object_creation_type = 3; }
message AppGetOrCreateResponse { string app_id = 1; }
message EnvironmentGetOrCreateRequest { string deployment_name = 1; int32 object_creation_type = 2; }
message EnvironmentSettings { string image_builder_version = 1; string webhook_suffix = 2; }
message EnvironmentMetadata { string name = 1; EnvironmentSettings settings = 2; }
message EnvironmentGetOrCreateResponse { string environment_id = 1; EnvironmentMetadata metadata = 2; }
message Image { repeated string dockerfile_commands = 6; }
message ImageGetOrCreateRequest { Image image = 2; string app_id = 4; bool force_build = 7; string builder_version = 9; }
message GenericResult { int32 status = 1; string exception = 2; int32 exitcode = 3; }
message ImageGetOrCreateResponse { string image_id = 1; GenericResult result = 2; }
message StringMap { map<string, string> contents = 1; }
message SecretSource { string secret_id = 1; StringMap env = 2; }
message SandboxTag { string tag_name = 1; string tag_value = 2; }
message Sandbox { repeated string entrypoint_args = 1; string image_id = 3; uint32 timeout_secs = 7; string workdir = 8; }
message SandboxCreateV2Request { string app_id = 1; Sandbox definition = 2; repeated SandboxTag tags = 4; repeated SecretSource secret_sources = 6; }
message CommandRouterAccess { string jwt = 1; string url = 2; }
message SandboxCreateV2Response { string sandbox_id = 1; string task_id = 3; CommandRouterAccess command_router_access = 5; }
message SandboxGetCommandRouterAccessRequest { string sandbox_id = 1; string task_id = 2; }
message SandboxGetCommandRouterAccessResponse { string jwt = 1; string url = 2; }
message SandboxWaitRequest { string sandbox_id = 1; float timeout = 2; }
message SandboxWaitResponse { GenericResult result = 1; }
message SandboxTerminateRequest { string sandbox_id = 1; }
message SandboxTerminateResponse { GenericResult existing_result = 1; }
message SandboxListRequest { string app_id = 1; double before_timestamp = 2; string environment_name = 3; bool include_finished = 4; repeated SandboxTag tags = 5; }
message SandboxInfo { string id = 1; double created_at = 3; string app_id = 5; repeated SandboxTag tags = 6; }
message SandboxListResponse { repeated SandboxInfo sandboxes = 1; }
message SandboxTagsGetRequest { string sandbox_id = 1; }
message SandboxTagsGetResponse { repeated SandboxTag tags = 1; }
`;

const ROUTER = `
syntax = "proto3";
package modal.task_command_router;
message Empty {}
message TaskExecStartRequest {
  string task_id = 1; string exec_id = 2; repeated string command_args = 3; int32 stdout_config = 4;
  int32 stderr_config = 5; uint32 timeout_secs = 6; string workdir = 7; map<string, string> env = 12;
  repeated modal.client.SecretSource secret_sources = 13;
}
message TaskExecStdioReadRequest { string task_id = 1; string exec_id = 2; uint64 offset = 3; int32 file_descriptor = 4; }
message TaskExecStdioReadResponse { bytes data = 1; }
message TaskExecStdinWriteRequest { string task_id = 1; string exec_id = 2; uint64 offset = 3; bytes data = 4; bool eof = 5; }
message TaskExecWaitRequest { string task_id = 1; string exec_id = 2; }
message TaskExecWaitResponse { oneof exit_status { int32 code = 1; int32 signal = 2; } }
`;

const root = new protobuf.Root();
protobuf.parse(CLIENT, root, { keepCase: false });
protobuf.parse(ROUTER, root, { keepCase: false });

/** A message type of the schema, by its short name in `modal.client` or `modal.task_command_router`. */
export function modalType(name: string): protobuf.Type {
  const found = root.lookupType(
    name.startsWith('TaskExec') ? `modal.task_command_router.${name}` : `modal.client.${name}`,
  );
  return found;
}

/** Encode a plain object as the named message. */
export function encodeModal(name: string, value: Record<string, unknown>): Buffer {
  const type = modalType(name);
  return Buffer.from(type.encode(type.fromObject(value)).finish());
}

/** Decode the named message into a plain object (defaults filled in, 64-bit numbers as numbers). */
export function decodeModal<T = Record<string, unknown>>(name: string, bytes: Uint8Array): T {
  const type = modalType(name);
  return type.toObject(type.decode(bytes), { longs: Number, defaults: true, oneofs: true }) as T;
}

/** gRPC's `RESOURCE_EXHAUSTED`, Modal's rate limit. */
export const RESOURCE_EXHAUSTED = 8;
/** The `Any` type URL of Modal's retry policy in a rate limit's status details. */
export const RETRY_POLICY_TYPE_URL = 'type.googleapis.com/modal.client.RPCRetryPolicy';

/** The retry-after of a `grpc-status-details-bin` value, in ms; `undefined` when it carries none. */
export function retryAfterFromStatusDetails(details: Uint8Array | undefined): number | undefined {
  if (details === undefined) return undefined;
  try {
    const status = decodeModal<{ details: Array<{ typeUrl: string; value: Uint8Array }> }>(
      'RPCStatus',
      details,
    );
    for (const any of status.details) {
      if (!any.typeUrl.endsWith('/modal.client.RPCRetryPolicy')) continue;
      const policy = decodeModal<{ retryAfterSecs: number }>('RPCRetryPolicy', any.value);
      return Math.round(policy.retryAfterSecs * 1000);
    }
  } catch {
    // not a status we can read
  }
  return undefined;
}
