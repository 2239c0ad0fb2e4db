#!/usr/bin/env node
// A stand-in for the EC2 instance metadata service (IMDSv2 only) for the tests of discover-aws-seeds and
// spot-watch: GETs need the token of a PUT /latest/api/token, as on EC2. Prints its port, then serves until
// killed. Under /spot (the default) the instance is a spot instance whose interruption notice appears after
// NOTICE_AFTER polls of spot/instance-action; under /on-demand it is an on-demand one.
//   node mock-imds.mjs [NOTICE_AFTER]
import http from 'node:http';

const TOKEN = 'mock-imds-token';
const noticeAfter = Number(process.argv[2] ?? 2);
let polls = 0;

const metadata = {
  'instance-id': 'i-0ccc',
  'placement/region': 'eu-west-1',
  'local-ipv4': '10.0.1.13',
};

const server = http.createServer((req, res) => {
  const reply = (status, body = '') => {
    res.writeHead(status, { 'Content-Type': 'text/plain' });
    res.end(body);
  };
  const match = /^(?:\/(spot|on-demand))?\/latest\/(.*)$/.exec(req.url);
  if (!match) return reply(404);
  const [, mode = 'spot', path] = match;
  if (path === 'api/token') {
    if (req.method !== 'PUT') return reply(405);
    const ttl = Number(req.headers['x-aws-ec2-metadata-token-ttl-seconds']);
    return ttl >= 1 && ttl <= 21600 ? reply(200, TOKEN) : reply(400);
  }
  if (req.method !== 'GET') return reply(405);
  if (req.headers['x-aws-ec2-metadata-token'] !== TOKEN) return reply(401);
  if (path === 'meta-data/instance-life-cycle') return reply(200, mode);
  if (path === 'meta-data/spot/instance-action') {
    if (mode !== 'spot' || ++polls <= noticeAfter) return reply(404);
    return reply(200, '{"action": "terminate", "time": "2030-01-01T00:02:00Z"}');
  }
  const key = path.replace(/^meta-data\//, '');
  return key in metadata ? reply(200, metadata[key]) : reply(404);
});

server.listen(0, '127.0.0.1', () => console.log(server.address().port));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
