// Copy engine. Mapping extents per job costs a page fault per 4 KiB page on every job, several
// times slower than memcpy between already-faulted mappings. So
// each file (memfd VRAM, guest RAM fd) is mapped whole once and kept in a small cache keyed by
// inode, and a copy is a walk over two lists of (pointer, length) pieces.
#include "copy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <immintrin.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

namespace vugpu::addon {

struct FileMap {
  uint8_t* base = nullptr;
  size_t len = 0;
  bool writable = false;
  uint64_t lastUse = 0;
  ~FileMap() {
    if (base) munmap(base, len);
  }
};

namespace {

const size_t kPage = size_t(sysconf(_SC_PAGESIZE));
// Bound on cached files (each is only address space until touched). Oldest-used goes first.
constexpr size_t kMaxCached = 64;
// Cancellation is checked between chunks of at most this many bytes.
constexpr size_t kChunk = size_t(4) << 20;

using Key = std::pair<dev_t, ino_t>;
std::mutex g_mu;
std::map<Key, std::shared_ptr<FileMap>> g_cache;
uint64_t g_useClock = 0;

// Resolve one fd to a mapping that covers [0, end) with the needed access. Caller holds g_mu.
int Resolve(int fd, uint64_t end, bool write, std::shared_ptr<FileMap>* out) {
  struct stat st;
  if (fstat(fd, &st) < 0) return -errno;
  if (!S_ISREG(st.st_mode)) return -EINVAL;
  if (write) {  // the cache is per file, so honour each fd's own access mode here
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return -errno;
    if ((fl & O_ACCMODE) == O_RDONLY) return -EACCES;
  }
  if (end > uint64_t(st.st_size)) return -EFAULT;  // touching it would SIGBUS
  Key key{st.st_dev, st.st_ino};
  auto it = g_cache.find(key);
  if (it != g_cache.end() && it->second->len >= end && (it->second->writable || !write)) {
    it->second->lastUse = ++g_useClock;
    *out = it->second;
    return 0;
  }
  auto m = std::make_shared<FileMap>();
  m->len = (size_t(st.st_size) + kPage - 1) & ~(kPage - 1);
  void* p = mmap(nullptr, m->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  m->writable = p != MAP_FAILED;
  if (p == MAP_FAILED && (errno == EACCES || errno == EPERM)) p = mmap(nullptr, m->len, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    m->len = 0;
    return -errno;
  }
  m->base = static_cast<uint8_t*>(p);
  if (write && !m->writable) return -EACCES;
  m->lastUse = ++g_useClock;
  if (g_cache.size() >= kMaxCached && !g_cache.count(key)) {
    auto victim = std::min_element(g_cache.begin(), g_cache.end(), [](auto& a, auto& b) {
      return a.second->lastUse < b.second->lastUse;
    });
    g_cache.erase(victim);
  }
  g_cache[key] = m;  // an older, smaller mapping lives on in the jobs that hold it
  *out = m;
  return 0;
}

int PlanSide(const std::vector<ExtentSpec>& ext, bool write, CopyPlan* plan,
             std::vector<CopyPiece>* pieces, uint64_t* total) {
  // Resolve each distinct fd once, against the furthest byte this job touches in it.
  std::map<int, uint64_t> ends;
  for (const ExtentSpec& e : ext) {
    uint64_t end = e.offset + e.length;
    auto [it, fresh] = ends.try_emplace(e.fd, end);
    if (!fresh) it->second = std::max(it->second, end);
  }
  std::map<int, FileMap*> maps;
  for (auto [fd, end] : ends) {
    std::shared_ptr<FileMap> m;
    if (int r = Resolve(fd, end, write, &m); r < 0) return r;
    maps[fd] = m.get();
    plan->holds.push_back(std::move(m));
  }
  pieces->reserve(ext.size());
  *total = 0;
  for (const ExtentSpec& e : ext) {
    if (e.length == 0) continue;
    pieces->push_back({maps[e.fd]->base + e.offset, size_t(e.length)});
    *total += e.length;
  }
  return 0;
}

}  // namespace

int PlanCopy(const std::vector<ExtentSpec>& src, const std::vector<ExtentSpec>& dst, CopyPlan* plan) {
  std::lock_guard<std::mutex> lk(g_mu);
  uint64_t s = 0, d = 0;
  if (int r = PlanSide(src, false, plan, &plan->src, &s); r < 0) return r;
  if (int r = PlanSide(dst, true, plan, &plan->dst, &d); r < 0) return r;
  if (s != d) return -EINVAL;
  plan->bytes = s;
  return 0;
}

// Large pieces bypass the cache with non-temporal stores: chunked memcpy stays well below the
// rate of the streaming stores that glibc only uses for single huge copies.
constexpr size_t kStreamMin = size_t(1) << 20;

void StreamCopy(uint8_t* d, const uint8_t* s, size_t n) {
  size_t head = (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31;
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  size_t blocks = n / 128;
  for (size_t i = 0; i < blocks; i++, d += 128, s += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 96), e);
  }
  _mm_sfence();
  memcpy(d, s, n % 128);
}

bool Overlaps(const uint8_t* a, const uint8_t* b, size_t n) { return a < b + n && b < a + n; }

int RunCopy(const CopyPlan& plan, const std::atomic<bool>& cancel) {
  size_t si = 0, di = 0, so = 0, dof = 0;
  while (si < plan.src.size() && di < plan.dst.size()) {
    if (cancel.load(std::memory_order_relaxed)) return -ECANCELED;
    const CopyPiece& s = plan.src[si];
    const CopyPiece& d = plan.dst[di];
    size_t n = std::min({s.len - so, d.len - dof, kChunk});
    uint8_t* dp = d.p + dof;
    const uint8_t* sp = s.p + so;
    if (n >= kStreamMin && !Overlaps(dp, sp, n)) StreamCopy(dp, sp, n);
    else memmove(dp, sp, n);  // memmove: src and dst may be the same file
    so += n;
    dof += n;
    if (so == s.len) si++, so = 0;
    if (dof == d.len) di++, dof = 0;
  }
  return 0;
}

int ForgetFile(int fd) {
  struct stat st;
  if (fstat(fd, &st) < 0) return -errno;
  std::lock_guard<std::mutex> lk(g_mu);
  g_cache.erase(Key{st.st_dev, st.st_ino});
  return 0;
}

void ClearFileCache() {
  std::lock_guard<std::mutex> lk(g_mu);
  g_cache.clear();
}

}  // namespace vugpu::addon
