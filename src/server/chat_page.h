// The browser chat page that `ember serve` returns for GET "/": a single
// self-contained HTML document (inline CSS and JS, no external assets) that
// uses the OpenAI-compatible endpoints GET /v1/models and streaming
// POST /v1/chat/completions of the same server.
#pragma once

#include <string>

namespace ember {

// The page, UTF-8 HTML (serve as "text/html; charset=utf-8"). The page sets
// its own Content-Security-Policy meta tag: inline script/style only and
// fetch to the same origin; a server-sent CSP header must allow inline
// script and style or the page will not run.
const std::string& chat_page_html();

}  // namespace ember
