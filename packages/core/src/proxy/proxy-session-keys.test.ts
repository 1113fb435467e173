/**
 * Every agent that can reach the proxy can name any session, so a session id is no credential: a turn
 * is accepted only with the session's key (`<id>.<128 random bits>`), and every wrong spelling is the
 * same 401.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { closeAll, post, script, setup } from '../__fixtures__/proxy-harness.js';

afterEach(closeAll);

const CHAT = { messages: [{ role: 'user', content: 'write to the other rollout' }] };
const MESSAGES = { max_tokens: 5, ...CHAT };

describe('capture proxy: session keys', () => {
  it("an agent that knows another session's id cannot post into it, in any spelling", async () => {
    const { proxy } = await setup(script('the answer for rollout-7'));
    const victim = proxy.openSession('rollout-7');
    const attacker = proxy.openSession('rollout-8');
    const secretOf = (key: string) => key.slice(key.lastIndexOf('.') + 1);
    expect(victim.apiKey).toMatch(/^rollout-7\.[A-Za-z0-9_-]{22}$/);
    expect(secretOf(victim.apiKey)).not.toBe(secretOf(attacker.apiKey));
    const forged = [
      'rollout-7', // the bare id: what a session's key was before
      'rollout-7.', // an empty secret
      `rollout-7.${secretOf(attacker.apiKey)}`, // the attacker's own secret on the victim's id
      `rollout-7.${secretOf(victim.apiKey).slice(0, -1)}`, // all but the last character
      `rollout-7.${secretOf(victim.apiKey).toUpperCase()}`,
      `${victim.apiKey}.`,
      ` rollout-7 `,
    ].filter((key) => key !== victim.apiKey);
    const answers: Array<{ status: number; text: string }> = [];
    for (const key of forged) {
      answers.push(
        await post(`${proxy.url}/v1/chat/completions`, CHAT, { authorization: `Bearer ${key}` }),
        await post(`${proxy.url}/v1/messages`, MESSAGES, { 'x-api-key': key }),
        await post(`${proxy.url}/sessions/${encodeURIComponent(key)}/v1/chat/completions`, CHAT),
        await post(`${proxy.url}/sessions/${encodeURIComponent(key)}/v1/responses`, { input: 'x' }),
      );
    }
    // the id spelled with percent escapes in the path, and escapes that decode to nothing (a 500 was
    // retried by harness SDKs as a server fault)
    for (const segment of ['rollout%2D7', 'rollout-7%', '%ZZ', 'rollout-7.%E0%A4%A', '%C0%AF'])
      answers.push(await post(`${proxy.url}/sessions/${segment}/v1/chat/completions`, CHAT));
    for (const answer of answers) {
      expect(answer.status).toBe(401);
      // a wrong secret and an unknown id read the same: a guess learns nothing
      expect(JSON.parse(answer.text).error.message).toMatch(/^no open session has this key: /);
    }
    expect(proxy.trajectories.trajectory('rollout-7').turns).toHaveLength(0);
    // the victim's own key still works, and its turn is the only one recorded
    const own = await post(`${victim.baseURL}/chat/completions`, CHAT);
    expect(own.status).toBe(200);
    expect(JSON.parse(own.text).choices[0].message.content).toBe('the answer for rollout-7');
    expect(proxy.trajectories.trajectory('rollout-7').turns).toHaveLength(1);
    expect(proxy.session('rollout-7')).toBe(victim);
  });

  it("a finished session's key gets its 409; a reopened id gets a new key the old one cannot use", async () => {
    const { proxy } = await setup(script('one', 'two'));
    const first = proxy.openSession('task-3');
    expect((await post(`${first.baseURL}/chat/completions`, CHAT)).status).toBe(200);
    proxy.finishSession('task-3', { reward: 0 });
    const late = await post(`${first.baseURL}/chat/completions`, CHAT);
    expect(late.status).toBe(409);
    const second = proxy.openSession('task-3');
    expect(second.apiKey).not.toBe(first.apiKey);
    // the first rollout's late request never lands in the second rollout
    expect((await post(`${first.baseURL}/chat/completions`, CHAT)).status).toBe(409);
    expect((await post(`${second.baseURL}/chat/completions`, CHAT)).status).toBe(200);
    expect(proxy.trajectories.trajectory('task-3').turns).toHaveLength(1);
    expect(proxy.session('nope')).toBeUndefined();
  });
});
