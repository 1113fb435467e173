import { describe, expect, it } from 'vitest';
import {
  encodeModal,
  RESOURCE_EXHAUSTED,
  RETRY_POLICY_TYPE_URL,
  retryAfterFromStatusDetails,
} from './wire.js';

const status = (details: Array<{ typeUrl: string; value: Uint8Array }>) =>
  encodeModal('RPCStatus', { code: RESOURCE_EXHAUSTED, message: 'slow down', details });

describe("Modal's rate-limit status details", () => {
  it('reads retry_after_secs of an RPCRetryPolicy as milliseconds', () => {
    const policy = encodeModal('RPCRetryPolicy', { retryAfterSecs: 2.5 });
    expect(retryAfterFromStatusDetails(status([{ typeUrl: RETRY_POLICY_TYPE_URL, value: policy }]))).toBe(
      2500,
    );
  });

  it('finds the policy among other details', () => {
    const policy = encodeModal('RPCRetryPolicy', { retryAfterSecs: 1 });
    const other = {
      typeUrl: 'type.googleapis.com/google.rpc.DebugInfo',
      value: new Uint8Array([10, 1, 120]),
    };
    expect(
      retryAfterFromStatusDetails(status([other, { typeUrl: RETRY_POLICY_TYPE_URL, value: policy }])),
    ).toBe(1000);
  });

  it('is undefined without details, without a policy, or for bytes that are no status', () => {
    expect(retryAfterFromStatusDetails(undefined)).toBeUndefined();
    expect(retryAfterFromStatusDetails(status([]))).toBeUndefined();
    expect(retryAfterFromStatusDetails(new Uint8Array([0xff, 0xff, 0xff]))).toBeUndefined();
  });
});
