// report_html_browser_test.cpp: report.html in headless Chromium: a non-blank screenshot, scripts
// run with no console errors, and hostile trace names stay text. Fails (never skips) without
// chromium.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/profiler/load_trace.h"
#include "ft/profiler/multi_rank.h"
#include "ft/reports/report.h"
#include "reference/report_sample.h"

namespace ft::reports {
namespace {

namespace fs = std::filesystem;
constexpr int kTimeoutS = 60;  // headless Chromium on a loaded 2-core machine can be slow

std::string find_chromium() {
  if (const char* env = std::getenv("FT_CHROMIUM"); env && *env) return env;
  for (const char* p :
       {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A private temp directory per test (removed at the end).
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ft-report-browser-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct RunResult {
  int status = -1;
  std::string out, err;
};

// Runs headless Chromium on `page` with extra `mode` flags (--dump-dom / --screenshot=...), as
// root-capable (--no-sandbox), with a private profile, no network, and a timeout.
RunResult run_chromium(const TempDir& tmp, const fs::path& page, const std::string& mode) {
  const std::string chromium = find_chromium();
  static int runs = 0;
  const fs::path profile = tmp.path / ("profile-" + std::to_string(++runs));
  const fs::path out = tmp.path / "stdout.txt", err = tmp.path / "stderr.txt";
  std::ostringstream cmd;
  cmd << "HOME=" << shell_quote(tmp.path.string())
      << " XDG_CONFIG_HOME=" << shell_quote(tmp.path.string())
      << " XDG_CACHE_HOME=" << shell_quote(tmp.path.string()) << " timeout -k 5 " << kTimeoutS
      << " " << shell_quote(chromium)
      << " --headless=new --no-sandbox --disable-gpu --no-first-run --no-default-browser-check"
         " --disable-extensions --disable-sync --disable-background-networking"
         " --disable-component-update --disable-default-apps --mute-audio"
         " --proxy-server=127.0.0.1:9 --host-resolver-rules='MAP * ~NOTFOUND'"
         " --enable-logging=stderr --v=0 --virtual-time-budget=5000"
      << " --user-data-dir=" << shell_quote(profile.string()) << " " << mode << " "
      << shell_quote("file://" + fs::absolute(page).string()) << " >" << shell_quote(out.string())
      << " 2>" << shell_quote(err.string()) << " </dev/null";
  RunResult r;
  const int rc = std::system(cmd.str().c_str());
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

// The console lines Chromium logs with --enable-logging=stderr ("...:INFO:CONSOLE:12] "msg"...").
std::vector<std::string> console_lines(const std::string& log) {
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find(":CONSOLE") != std::string::npos) lines.push_back(line);
  }
  return lines;
}

// ---- a small PNG decoder (8-bit RGB/RGBA, non-interlaced: what Chromium writes) --------------
struct Image {
  uint32_t width = 0, height = 0;
  std::vector<uint32_t> rgb;  // 0xRRGGBB per pixel
};

uint32_t be32(const unsigned char* p) {
  return uint32_t(p[0]) << 24 | p[1] << 16 | p[2] << 8 | p[3];
}

Image decode_png(const std::string& file) {
  const auto* b = reinterpret_cast<const unsigned char*>(file.data());
  if (file.size() < 8 || file.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0)
    throw std::runtime_error("not a PNG");
  Image img;
  int channels = 0;
  std::string idat;
  for (size_t p = 8; p + 12 <= file.size();) {
    const uint32_t len = be32(b + p);
    const std::string type = file.substr(p + 4, 4);
    if (p + 12 + len > file.size()) throw std::runtime_error("truncated PNG chunk " + type);
    const unsigned char* data = b + p + 8;
    if (type == "IHDR") {
      img.width = be32(data);
      img.height = be32(data + 4);
      if (data[8] != 8 || data[12] != 0)
        throw std::runtime_error("PNG: need 8-bit, non-interlaced");
      channels = data[9] == 6 ? 4 : data[9] == 2 ? 3 : 0;
      if (channels == 0) throw std::runtime_error("PNG: need RGB or RGBA");
    } else if (type == "IDAT") {
      idat.append(reinterpret_cast<const char*>(data), len);
    } else if (type == "IEND") {
      break;
    }
    p += 12 + len;
  }
  const size_t stride = size_t(img.width) * channels;
  std::vector<unsigned char> raw((stride + 1) * img.height);
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) !=
          Z_OK ||
      raw_len != raw.size()) {
    throw std::runtime_error("PNG: bad zlib stream");
  }
  std::vector<unsigned char> prev(stride, 0), cur(stride);
  img.rgb.reserve(size_t(img.width) * img.height);
  for (uint32_t y = 0; y < img.height; ++y) {
    const unsigned char* row = raw.data() + y * (stride + 1);
    const int filter = row[0];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= size_t(channels) ? cur[i - channels] : 0, up = prev[i];
      const int c = i >= size_t(channels) ? prev[i - channels] : 0;
      int pred = 0;
      switch (filter) {
        case 0:
          pred = 0;
          break;
        case 1:
          pred = a;
          break;
        case 2:
          pred = up;
          break;
        case 3:
          pred = (a + up) / 2;
          break;
        case 4: {
          const int pa = std::abs(up - c), pb = std::abs(a - c), pc = std::abs(a + up - 2 * c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? up : c;
          break;
        }
        default:
          throw std::runtime_error("PNG: bad filter");
      }
      cur[i] = static_cast<unsigned char>(row[1 + i] + pred);
    }
    for (uint32_t x = 0; x < img.width; ++x) {
      const unsigned char* px = cur.data() + size_t(x) * channels;
      img.rgb.push_back(uint32_t(px[0]) << 16 | px[1] << 8 | px[2]);
    }
    std::swap(prev, cur);
  }
  return img;
}

#define REQUIRE_CHROMIUM()                                                                       \
  ASSERT_FALSE(find_chromium().empty())                                                          \
      << "chromium not found: the report.html browser test needs Debian's chromium. Install it " \
         "with `bash scripts/deps.sh core` (scripts/test.sh does) or set FT_CHROMIUM"

TEST(ReportHtmlBrowser, ScreenshotShowsTheCharts) {
  REQUIRE_CHROMIUM();
  TempDir tmp;
  write_reports(testing::sample_diagnosis(24), tmp.path / "run");
  const fs::path shot = tmp.path / "shot.png";
  const RunResult r = run_chromium(
      tmp, tmp.path / "run/report.html",
      "--hide-scrollbars --window-size=1280,1600 --screenshot=" + shell_quote(shot.string()));
  ASSERT_EQ(r.status, 0) << "chromium failed or timed out (" << kTimeoutS << " s):\n" << r.err;
  ASSERT_TRUE(fs::exists(shot)) << r.err;
  const Image img = decode_png(read_file(shot));
  EXPECT_EQ(img.width, 1280u);
  EXPECT_EQ(img.height, 1600u);
  std::set<uint32_t> colours(img.rgb.begin(), img.rgb.end());
  size_t non_white = 0, compute = 0, data = 0;
  for (uint32_t c : img.rgb) {
    non_white += c != 0xffffff;
    compute += c == 0x4e79a7;  // the compute segments (solid fill) of the stacked chart
    data += c == 0xf28e2b;     // the data segments
  }
  const double frac = double(non_white) / double(img.rgb.size());
  std::cout << "screenshot: " << colours.size() << " distinct colours, " << frac * 100
            << "% non-white, compute px " << compute << ", data px " << data << "\n";
  EXPECT_GE(colours.size(), 64u);
  EXPECT_GT(frac, 0.10);
  EXPECT_GT(compute, 20000u);  // 24 bars x ~36 px x ~120 px of compute
  EXPECT_GT(data, 5000u);
  EXPECT_TRUE(console_lines(r.err).empty()) << console_lines(r.err)[0];
}

TEST(ReportHtmlBrowser, ScriptsRunCleanAndHostileNamesStayText) {
  REQUIRE_CHROMIUM();
  TempDir tmp;
  write_reports(testing::hostile_diagnosis(24), tmp.path / "run");
  const RunResult r = run_chromium(tmp, tmp.path / "run/report.html", "--dump-dom");
  ASSERT_EQ(r.status, 0) << "chromium failed or timed out (" << kTimeoutS << " s):\n" << r.err;
  const auto console = console_lines(r.err);
  EXPECT_TRUE(console.empty()) << console.size() << " console messages, first: " << console[0];
  // The page's script ran to the end over all 24 steps; no error and no alert() was recorded.
  EXPECT_NE(r.out.find("data-ft-ready=\"24\""), std::string::npos) << r.out.substr(0, 400);
  EXPECT_EQ(r.out.find("data-ft-error=\""), std::string::npos);
  EXPECT_EQ(r.out.find("data-ft-alert=\""), std::string::npos);
  // The live DOM holds no injected elements: names are text nodes.
  EXPECT_EQ(r.out.find("<img"), std::string::npos);
  EXPECT_EQ(r.out.find("<b>bold</b>"), std::string::npos);
  EXPECT_NE(r.out.find("span &lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(r.out.find("\"&gt;&lt;img src=x onerror=alert(1)&gt;"), std::string::npos);
  // The timeline's hostile lane and span names are text too (SVG <text> and <title>).
  EXPECT_NE(r.out.find("id=\"ft-timeline\""), std::string::npos);
  EXPECT_NE(r.out.find("<title>training thread: &lt;script&gt;alert(1)&lt;/script&gt;</title>"),
            std::string::npos);
  // The hover read-out was filled by the script (slowest step 7).
  EXPECT_NE(r.out.find("slowest step 7: 161.00 ms"), std::string::npos);
}

// The import report of a real GPU trace (a V100 PyTorch trace from HTA's tests, not written
// here): the page runs clean, the timeline draws every span the report holds, and its pixels
// show the device's compute and the host's launches in their class colours.
TEST(ReportHtmlBrowser, RealGpuTraceImportShowsTheTimeline) {
  REQUIRE_CHROMIUM();
  TempDir tmp;
  const fs::path trace = fs::path(FT_SOURCE_DIR) / "tests/data/hta/ns_resolution_trace";
  const profiler::Diagnosis d = profiler::diagnose_trace_ranks(profiler::load_kineto_ranks(trace));
  ASSERT_FALSE(d.timeline.steps.empty());
  ASSERT_GT(d.timeline.spans.size(), 500u);
  write_reports(d, tmp.path / "run");
  const RunResult dom = run_chromium(tmp, tmp.path / "run/report.html", "--dump-dom");
  ASSERT_EQ(dom.status, 0) << dom.err;
  EXPECT_TRUE(console_lines(dom.err).empty()) << console_lines(dom.err)[0];
  EXPECT_NE(dom.out.find("data-ft-ready=\""), std::string::npos);
  EXPECT_EQ(dom.out.find("data-ft-error=\""), std::string::npos);
  size_t rects = 0;
  for (size_t at = dom.out.find("<rect class=\"span\""); at != std::string::npos;
       at = dom.out.find("<rect class=\"span\"", at + 1))
    ++rects;
  EXPECT_EQ(rects, d.timeline.spans.size());
  // Only the timeline shown (the page's own CSP allows inline styles), then a screenshot.
  std::string html = read_file(tmp.path / "run/report.html");
  const size_t style_end = html.find("</style>");
  ASSERT_NE(style_end, std::string::npos);
  html.insert(style_end, "header,main>*:not(#timeline){display:none}");
  write_file_atomic(tmp.path / "timeline.html", html);
  const fs::path shot = tmp.path / "timeline.png";
  const RunResult r = run_chromium(
      tmp, tmp.path / "timeline.html",
      "--hide-scrollbars --window-size=1280,400 --screenshot=" + shell_quote(shot.string()));
  ASSERT_EQ(r.status, 0) << r.err;
  const Image img = decode_png(read_file(shot));
  size_t compute = 0, host = 0;
  for (uint32_t c : img.rgb) {
    compute += c == 0x4e79a7;  // kernels on the stream
    host += c == 0xedc948;     // CPU operators and launches on the training thread
  }
  std::cout << "timeline screenshot: compute px " << compute << ", host px " << host << "\n";
  EXPECT_GT(compute, 2000u);
  EXPECT_GT(host, 2000u);
}

// Negative control: a page whose script fails must be caught by the same checks.
TEST(ReportHtmlBrowser, DetectsABrokenPage) {
  REQUIRE_CHROMIUM();
  TempDir tmp;
  std::string html = render_html(testing::sample_diagnosis(4));
  const std::string marker = "\"format\":\"ft-report\"";
  const size_t at = html.find(marker);
  ASSERT_NE(at, std::string::npos);
  html.replace(at, marker.size(), "\"format\":\"ft-broken\"");
  write_file_atomic(tmp.path / "broken.html", html);
  const RunResult r = run_chromium(tmp, tmp.path / "broken.html", "--dump-dom");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(console_lines(r.err).empty()) << "the uncaught error was not logged:\n" << r.err;
  EXPECT_NE(r.out.find("data-ft-error=\"Uncaught Error: ft report data missing\""),
            std::string::npos)
      << r.out.substr(0, 400);
  EXPECT_EQ(r.out.find("data-ft-ready=\""), std::string::npos);
}

}  // namespace
}  // namespace ft::reports
