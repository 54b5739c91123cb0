#!/usr/bin/env node
// Ask a running warden checkpoint whether an agent may make one tool call.
//
//   node check.js --agent recon --tool get_task --args '{"task_id":"task-1"}'
//
// Target: --target (or WARDEN_CHECKPOINT): "127.0.0.1:7401" for TCP, "unix:///abs/path.sock" for
// the sidecar socket. TCP needs a bearer token: --token-file FILE (a `warden keys init` tokens file;
// the first token is used) or WARDEN_TOKEN. Prints one JSON line per answer; exits 0 on ALLOW,
// 1 on any other verdict, 2 when the call failed (the stable code is printed).
//
// The checkpoint establishes runs itself: the client first calls StartRun (--person, --agent,
// --agent-version, --mode, --tenant), which mints the run id and a signed run token, and presents
// that token in run.run_token on the Check. --run-token TOKEN reuses a run instead (the token
// decides the run's person, agent, version, mode and tenant); --run RUN_ID, with it, is sent as
// run.run_id and the checkpoint refuses the call when it is not the token's run.
'use strict';

const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_ROOT = path.resolve(__dirname, '..', '..', 'proto');

function parseArgs(argv) {
  const out = {
    target: process.env.WARDEN_CHECKPOINT || '127.0.0.1:7401',
    token: process.env.WARDEN_TOKEN || '',
    tokenFile: '',
    agent: 'recon',
    agentVersion: '', // empty: StartRun pins the agent's current version
    mode: 'interactive', // or background
    tool: 'get_task',
    args: '{"task_id":"task-1"}',
    person: 'alice',
    run: '', // run ids are minted by StartRun; only checked against --run-token's run
    runToken: '',
    tenant: 'acme',
  };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (!(key in out) || argv[i + 1] === undefined) {
      throw new Error(`unknown or incomplete option ${argv[i]}`);
    }
    out[key] = argv[i + 1];
  }
  if (out.tokenFile) {
    const line = fs.readFileSync(out.tokenFile, 'utf8').split('\n')
      .map((l) => l.trim()).find((l) => l && !l.startsWith('#'));
    if (!line) throw new Error(`${out.tokenFile}: no token`);
    const parts = line.split(/\s+/);
    out.token = parts[parts.length - 1];
  }
  if (!MODES[out.mode]) throw new Error(`--mode must be interactive or background, not ${out.mode}`);
  if (out.run && !out.runToken) {
    throw new Error('--run needs --run-token: the checkpoint mints run ids (StartRun)');
  }
  return out;
}

const MODES = { interactive: 'RUN_MODE_INTERACTIVE', background: 'RUN_MODE_BACKGROUND' };

// google.protobuf.Struct as proto-loader represents it.
function toValue(v) {
  if (v === null) return { nullValue: 'NULL_VALUE' };
  if (Array.isArray(v)) return { listValue: { values: v.map(toValue) } };
  switch (typeof v) {
    case 'string': return { stringValue: v };
    case 'number': return { numberValue: v };
    case 'boolean': return { boolValue: v };
    case 'object': return { structValue: toStruct(v) };
    default: throw new Error(`not JSON: ${typeof v}`);
  }
}

function toStruct(obj) {
  const fields = {};
  for (const [k, v] of Object.entries(obj)) fields[k] = toValue(v);
  return { fields };
}

function loadService() {
  const definition = protoLoader.loadSync('warden/checkpoint/v1/checkpoint.proto', {
    includeDirs: [PROTO_ROOT],
    keepCase: true,
    enums: String,
    longs: String,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).warden.checkpoint.v1.CheckpointService;
}

// The server puts the stable code first in the status message ("unauthenticated: ..."); the
// same code travels as an ErrorDetail in the grpc-status-details-bin trailer.
function stableCode(err) {
  const m = /^([a-z_]+):/.exec(err.details || '');
  return m ? m[1] : '';
}

function answer(res, run) {
  return {
    decision_id: res.decision_id,
    verdict: res.verdict,
    code: res.code,
    rule: res.rule,
    reason: res.reason,
    agent_version: res.agent_version,
    policy_revision: res.policy_revision,
    grant: res.grant ? { tool: res.grant.tool, arguments_sha256: res.grant.arguments_sha256, key_id: res.grant.key_id } : null,
    ...run,
  };
}

function call(client, method, request, metadata) {
  return new Promise((resolve, reject) => {
    client[method](request, metadata, { deadline: Date.now() + 10000 }, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const Service = loadService();
  const client = new Service(opts.target, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  if (opts.token) metadata.set('authorization', `Bearer ${opts.token}`);
  try {
    const args = toStruct(JSON.parse(opts.args));
    let run = { run_token: opts.runToken, run_id: opts.run };
    if (!opts.runToken) {
      // The checkpoint starts the run: it pins the agent's version, mints the run id and signs
      // a run token for this caller. A refused start is a recorded DENY, printed like any answer.
      const started = await call(client, 'StartRun', {
        tenant: opts.tenant,
        person: opts.person,
        agent: opts.agent,
        agent_version: opts.agentVersion,
        mode: MODES[opts.mode],
      }, metadata);
      if (started.decision.verdict !== 'VERDICT_ALLOW' || !started.run_token) {
        console.log(JSON.stringify(answer(started.decision, {})));
        return 1;
      }
      run = { run_token: started.run_token, run_id: started.run_id };
    }
    const request = {
      // Only the token is needed (the checkpoint puts the run back on it); a run id sent along
      // must be the token's.
      run: { run_token: run.run_token, run_id: run.run_id },
      tool_call: { tool: opts.tool, arguments: args },
      counters: { stretch_turns: 1, total_turns: 1 },
    };
    const res = await call(client, 'Check', request, metadata);
    // run_id and run_token let the caller go on in the same run (--run-token, --run).
    console.log(JSON.stringify(answer(res, { run_id: run.run_id || res.grant?.run_id || '', run_token: run.run_token })));
    return res.verdict === 'VERDICT_ALLOW' ? 0 : 1;
  } catch (err) {
    console.log(JSON.stringify({ error: grpc.status[err.code], code: stableCode(err), details: err.details }));
    return 2;
  } finally {
    client.close();
  }
}

main().then((code) => process.exit(code), (err) => { console.error(err.message); process.exit(2); });
