// A tiny HTTP router for a notes service: routes by method and path pattern, JSON in and out.

import { createServer, IncomingMessage, ServerResponse } from "node:http";

type Params = Record<string, string>;
type Handler = (req: IncomingMessage, params: Params, body: unknown) => Promise<Reply>;

interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

interface Route {
  method: string;
  pattern: RegExp;
  keys: string[];
  handler: Handler;
}

interface Note {
  id: number;
  title: string;
  text: string;
  tags: string[];
  updatedAt: string;
}

export class Router {
  private routes: Route[] = [];

  add(method: string, path: string, handler: Handler): this {
    const keys: string[] = [];
    const source = path.replace(/:(\w+)/g, (_, key: string) => {
      keys.push(key);
      return "([^/]+)";
    });
    this.routes.push({ method, pattern: new RegExp(`^${source}$`), keys, handler });
    return this;
  }

  get(path: string, handler: Handler): this {
    return this.add("GET", path, handler);
  }

  post(path: string, handler: Handler): this {
    return this.add("POST", path, handler);
  }

  put(path: string, handler: Handler): this {
    return this.add("PUT", path, handler);
  }

  delete(path: string, handler: Handler): this {
    return this.add("DELETE", path, handler);
  }

  match(method: string, path: string): { route: Route; params: Params } | undefined {
    for (const route of this.routes) {
      if (route.method !== method) {
        continue;
      }
      const found = route.pattern.exec(path);
      if (found) {
        const params: Params = {};
        route.keys.forEach((key, i) => (params[key] = decodeURIComponent(found[i + 1])));
        return { route, params };
      }
    }
    return undefined;
  }
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) {
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  return text ? JSON.parse(text) : undefined;
}

function send(res: ServerResponse, reply: Reply): void {
  res.writeHead(reply.status, { "Content-Type": "application/json", ...reply.headers });
  res.end(reply.body === undefined ? "" : JSON.stringify(reply.body));
}

const notes = new Map<number, Note>();
let nextId = 1;

function isNoteInput(value: unknown): value is { title: string; text: string; tags?: string[] } {
  if (typeof value !== "object" || value === null) {
    return false;
  }
  const input = value as Record<string, unknown>;
  return typeof input.title === "string" && typeof input.text === "string";
}

export const router = new Router()
  .get("/notes", async () => ({ status: 200, body: [...notes.values()] }))
  .get("/notes/:id", async (_req, params) => {
    const note = notes.get(Number(params.id));
    return note ? { status: 200, body: note } : { status: 404, body: { error: "no such note" } };
  })
  .post("/notes", async (_req, _params, body) => {
    if (!isNoteInput(body)) {
      return { status: 400, body: { error: "a note needs a title and a text" } };
    }
    const note: Note = { id: nextId++, title: body.title, text: body.text, tags: body.tags ?? [], updatedAt: new Date().toISOString() };
    notes.set(note.id, note);
    return { status: 201, body: note, headers: { Location: `/notes/${note.id}` } };
  })
  .put("/notes/:id", async (_req, params, body) => {
    const note = notes.get(Number(params.id));
    if (!note) {
      return { status: 404, body: { error: "no such note" } };
    }
    if (!isNoteInput(body)) {
      return { status: 400, body: { error: "a note needs a title and a text" } };
    }
    const updated: Note = { ...note, title: body.title, text: body.text, tags: body.tags ?? note.tags, updatedAt: new Date().toISOString() };
    notes.set(note.id, updated);
    return { status: 200, body: updated };
  })
  .delete("/notes/:id", async (_req, params) => {
    const removed = notes.delete(Number(params.id));
    return removed ? { status: 204 } : { status: 404, body: { error: "no such note" } };
  })
  .get("/tags/:tag", async (_req, params) => {
    const tagged = [...notes.values()].filter((note) => note.tags.includes(params.tag));
    return { status: 200, body: tagged };
  });

export function listen(port: number): void {
  const server = createServer(async (req, res) => {
    const url = new URL(req.url ?? "/", "http://localhost");
    const matched = router.match(req.method ?? "GET", url.pathname);
    if (!matched) {
      send(res, { status: 404, body: { error: `no route for ${req.method} ${url.pathname}` } });
      return;
    }
    try {
      const body = await readJson(req);
      send(res, await matched.route.handler(req, matched.params, body));
    } catch (err) {
      const status = err instanceof SyntaxError ? 400 : 500;
      send(res, { status, body: { error: String(err) } });
    }
  });
  server.listen(port, () => console.log(`notes on http://localhost:${port}`));
}
