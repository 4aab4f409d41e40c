// layering_probe.cpp: includes every profiler and reports header and links ft_reports + ft_profiler
// alone, so the analysis stack is proven to build and run without the engine: loads a Kineto
// trace, diagnoses it and renders every report format.
#include <cstdio>
#include <exception>

#include "layering_probe_headers.h"  // generated: every include/ft/{profiler,reports}/*.h

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: layering_probe TRACE\n");
    return 2;
  }
  try {
    const ft::profiler::Trace t = ft::profiler::load_trace(argv[1]);
    const ft::profiler::Diagnosis d = ft::profiler::diagnose(t);
    const size_t bytes = ft::reports::render_json(d).size() + ft::reports::render_markdown(d).size() +
                         ft::reports::render_html(d).size();
    std::printf("ok: %zu events, %zu steps, %zu report bytes, no engine linked\n", t.events.size(),
                d.steps.size(), bytes);
    return bytes > 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "layering_probe: %s\n", e.what());
    return 1;
  }
}
