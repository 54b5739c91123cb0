#!/usr/bin/env node
// Re-verify warden's hashes and grant signatures in Node, with nothing from warden: the proof that
// the bytes warden hashes do not depend on who serialises them (RFC 8785; docs/audit.md).
//
//   node verify.js records EXPORT.jsonl        # `warden audit export` output: every record's hash and link
//   node verify.js grant GRANT.json KEY.json   # a grant's HMAC and the hash of the arguments it binds
//   node verify.js heads ANCHORS.jsonl PUB.pem # signed heads (`warden audit anchors`, `warden audit pubkey`)
//
// GRANT.json: {"grant": {decision_id, run_id, agent, agent_version, tool, arguments_sha256,
// policy_revision, expires_at_ms, key_id, signature (hex)}, "arguments": {...the call's arguments}}.
// KEY.json: the grant key file (`warden keys init`: {"key_id", "secret" (hex)}). Verifying a grant
// needs the secret: grants are HMACs (docs/grants.md), so whoever verifies one could mint one.
//
// Prints one JSON line; exits 0 when everything verifies, 1 when something does not, 2 on misuse.
// No npm packages needed (Node >= 18).
'use strict';

const crypto = require('crypto');
const fs = require('fs');

// RFC 8785 (JSON Canonicalization Scheme). JSON.stringify already writes numbers (ECMAScript's
// shortest form: 1e-7, 1e+21, 5) and strings (only " \ and U+0000..U+001F escaped) the RFC's way;
// what is left is key order by UTF-16 code units, which is what Array.prototype.sort does.
function canonicalize(value) {
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new Error(`${value} has no JSON form`);
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonicalize).join(',')}]`;
  if (typeof value === 'object') {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonicalize(value[k])}`).join(',')}}`;
  }
  throw new Error(`not JSON: ${typeof value}`);
}

const sha256 = (text) => crypto.createHash('sha256').update(text, 'utf8').digest('hex');

// The log stores these columns as RFC 8785 text, and an export prints them parsed.
const JSON_COLUMNS = ['actor_chain', 'arguments'];

// hash = sha256(prev_hash || RFC8785(every column but prev_hash and hash, JSON columns as text))
function recordHash(record) {
  const fields = {};
  for (const [name, value] of Object.entries(record)) {
    if (name === 'prev_hash' || name === 'hash') continue;
    fields[name] = JSON_COLUMNS.includes(name) && value !== null ? canonicalize(value) : value;
  }
  return sha256(record.prev_hash + canonicalize(fields));
}

function verifyRecords(file) {
  const lines = fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.trim());
  let prev = null;
  let expected = null;
  for (const line of lines) {
    const record = JSON.parse(line);
    if (expected !== null && record.seq !== expected) {
      return { ok: false, seq: expected, reason: 'gap', detail: `next record is seq ${record.seq}` };
    }
    if (prev !== null && record.prev_hash !== prev) {
      return { ok: false, seq: record.seq, reason: 'broken_link' };
    }
    const computed = recordHash(record);
    if (computed !== record.hash) {
      return { ok: false, seq: record.seq, reason: 'hash_mismatch', stored: record.hash, computed };
    }
    prev = record.hash;
    expected = record.seq + 1;
  }
  return { ok: true, records: lines.length, head_seq: expected === null ? 0 : expected - 1, head_hash: prev };
}

const GRANT_FIELDS = ['decision_id', 'run_id', 'agent', 'agent_version', 'tool', 'arguments_sha256',
  'policy_revision', 'expires_at_ms', 'key_id'];

function verifyGrant(file, keyFile) {
  const { grant, arguments: args } = JSON.parse(fs.readFileSync(file, 'utf8'));
  const key = JSON.parse(fs.readFileSync(keyFile, 'utf8'));
  const signed = { v: 1 };
  for (const name of GRANT_FIELDS) signed[name] = grant[name];
  const mac = crypto.createHmac('sha256', Buffer.from(key.secret, 'hex')).update(canonicalize(signed), 'utf8').digest();
  const given = Buffer.from(grant.signature, 'hex');
  const signature = key.key_id === grant.key_id && given.length === mac.length && crypto.timingSafeEqual(given, mac);
  const argumentsSha256 = sha256(canonicalize(args));
  return {
    ok: signature && argumentsSha256 === grant.arguments_sha256,
    signature,
    arguments_sha256: argumentsSha256,
    arguments_canonical: canonicalize(args),
  };
}

// A signed head: Ed25519 over RFC8785({v, seq, hash, time, key_id}); key_id is the first 16 hex
// digits of sha256 of the raw 32-byte public key.
function verifyHeads(file, pubFile) {
  const publicKey = crypto.createPublicKey(fs.readFileSync(pubFile, 'utf8'));
  const raw = publicKey.export({ format: 'der', type: 'spki' }).subarray(-32);
  const keyId = crypto.createHash('sha256').update(raw).digest('hex').slice(0, 16);
  const heads = fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
  for (const [i, head] of heads.entries()) {
    const signed = canonicalize({ v: head.v, seq: head.seq, hash: head.hash, time: head.time, key_id: head.key_id });
    const ok = head.key_id === keyId
      && crypto.verify(null, Buffer.from(signed, 'utf8'), publicKey, Buffer.from(head.signature, 'hex'));
    if (!ok) return { ok: false, anchor: i + 1, seq: head.seq, reason: 'signature' };
  }
  return { ok: true, heads: heads.length, key_id: keyId, last_seq: heads.length ? heads[heads.length - 1].seq : 0 };
}

function main(argv) {
  const [command, ...rest] = argv;
  let result;
  if (command === 'records' && rest.length === 1) result = verifyRecords(rest[0]);
  else if (command === 'grant' && rest.length === 2) result = verifyGrant(rest[0], rest[1]);
  else if (command === 'heads' && rest.length === 2) result = verifyHeads(rest[0], rest[1]);
  else {
    process.stderr.write('usage: node verify.js records EXPORT.jsonl | grant GRANT.json KEY.json | heads ANCHORS.jsonl PUB.pem\n');
    return 2;
  }
  console.log(JSON.stringify(result));
  return result.ok ? 0 : 1;
}

if (require.main === module) process.exitCode = main(process.argv.slice(2));
module.exports = { canonicalize, recordHash };
