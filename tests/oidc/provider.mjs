// A real OpenID provider for the single sign-on tests: panva's oidc-provider (OpenID
// Certified), its development login pages (any login id, any password), one confidential
// client. Started by tests/accounts/test_sso.py:
//
//   node provider.mjs   with OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_REDIRECT_URI and
//                        OIDC_ACCOUNTS (a JSON file {"<sub>": {<claims>}}, read at each login,
//                        so a test changes what the provider says between logins)
//
// It listens on a free port of 127.0.0.1, prints {"issuer": "http://127.0.0.1:PORT"} on one
// line, and exits when its stdin closes (the test ended, however it ended) or on SIGTERM.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

import Provider from 'oidc-provider';

const env = (name) => {
  const value = process.env[name];
  if (!value) {
    console.error(`provider.mjs: ${name} is not set`);
    process.exit(2);
  }
  return value;
};

const accountsFile = env('OIDC_ACCOUNTS');
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: 'test-key-1', alg: 'RS256', use: 'sig' };

const server = createServer();
server.listen(0, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: [{
      client_id: env('OIDC_CLIENT_ID'),
      client_secret: env('OIDC_CLIENT_SECRET'),
      redirect_uris: [env('OIDC_REDIRECT_URI')],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_post',
    }],
    jwks: { keys: [jwk] },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['preferred_username', 'name', 'given_name', 'family_name'],
      groups: ['groups'],
    },
    features: { devInteractions: { enabled: true } },
    async findAccount(ctx, sub) {
      const accounts = JSON.parse(readFileSync(accountsFile, 'utf8'));
      const claims = accounts[sub];
      if (!claims) return undefined;
      return { accountId: sub, async claims() { return { ...claims, sub }; } };
    },
  });
  provider.on('server_error', (ctx, err) => console.error('provider server_error:', err));
  // Its development pages load a web font from the internet (the tests have none) and the
  // browser asks for a favicon: keep both off a browser test's console.
  provider.use(async (ctx, next) => {
    if (ctx.path === '/favicon.ico') {
      ctx.status = 204;
      return;
    }
    await next();
    if (typeof ctx.body === 'string' && ctx.type === 'text/html') {
      ctx.body = ctx.body.replace(/@import url\(https:\/\/fonts\.googleapis\.com[^)]*\);/g, '');
    }
  });
  server.on('request', provider.callback());
  console.log(JSON.stringify({ issuer }));
});

const stop = () => server.close(() => process.exit(0)) && setTimeout(() => process.exit(0), 500).unref();
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.resume();
