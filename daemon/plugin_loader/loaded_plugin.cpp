#include "plugin_loader/loaded_plugin.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string_view>
#include <utility>

#include "core/redact.h"
#include "core/thread_annotations.h"
#include "plugin_loader/file_trust.h"
#include "runtime/log_line.h"

namespace akadzed {

LoadedPlugin::~LoadedPlugin() { dlclose(handle_); }

std::string LoadedPlugin::label() const {
  return api_->version ? fmt::format("{} {}", api_->name, api_->version) : api_->name;
}

namespace {

// struct akadzed_plugin up to its last version-1 member.
constexpr std::size_t kPluginV1Size =
    offsetof(akadzed_plugin, shutdown) + sizeof(akadzed_plugin::shutdown);

// Open plugins by canonical path. Expired entries are swept on each open.
struct OpenPlugins {
  Mutex mu;
  std::map<std::string, std::weak_ptr<LoadedPlugin>> by_path GUARDED_BY(mu);
};
OpenPlugins& Registry() {
  static OpenPlugins registry;
  return registry;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out;
}

bool IsRegularFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The file config.path names, per PluginHandlerConfig's rules.
std::string ResolvePluginPath(const std::string& path) {
  if (path.empty()) throw PluginError("plugin: empty path");
  if (path.find('/') != std::string::npos) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
      throw PluginError(fmt::format("plugin {}: {}", path, std::strerror(errno)));
    }
    if (!S_ISREG(st.st_mode)) throw PluginError(fmt::format("plugin {}: not a regular file", path));
    return path;
  }
  const std::vector<std::string> dirs = PluginSearchPath();
  for (const std::string& dir : dirs) {
    std::string candidate = dir + "/" + path;
    if (IsRegularFile(candidate)) return candidate;
  }
  throw PluginError(fmt::format("plugin {}: not found in {}", path,
                                dirs.empty() ? "(no plugin directories)" : Join(dirs)));
}

// The ABI problems of `api` as a message, or "" when it is usable.
std::string CheckAbi(const akadzed_plugin* api) {
  if (api == nullptr) return AKADZED_PLUGIN_ENTRY_SYMBOL "() returned NULL";
  if (api->struct_size >= offsetof(akadzed_plugin, name) &&
      api->abi_version != AKADZED_PLUGIN_ABI_VERSION) {
    return fmt::format("plugin ABI version {}, but this akadzed supports version {}; rebuild it "
                       "against this akadzed's akadzed/plugin.h",
                       api->abi_version, AKADZED_PLUGIN_ABI_VERSION);
  }
  if (api->struct_size < kPluginV1Size) {
    return fmt::format("struct akadzed_plugin is {} bytes, but ABI version {} needs at least {}",
                       api->struct_size, AKADZED_PLUGIN_ABI_VERSION, kPluginV1Size);
  }
  std::vector<std::string> missing;
  if (api->name == nullptr) missing.emplace_back("name");
  if (api->init == nullptr) missing.emplace_back("init");
  const bool hooks = AKADZED_HAS_MEMBER(api, akadzed_plugin, on_transition) && api->on_transition;
  if (api->handle == nullptr && !hooks) missing.emplace_back("handle");
  if (api->shutdown == nullptr) missing.emplace_back("shutdown");
  if (!missing.empty()) return "struct akadzed_plugin has no " + Join(missing);
  return "";
}

}  // namespace

// Opens the plugin `configured` names, or shares it when it is open already.
std::shared_ptr<LoadedPlugin> OpenPlugin(const std::string& configured) {
  const std::string file = ResolvePluginPath(configured);
  std::error_code ec;
  std::string path = std::filesystem::canonical(file, ec).string();
  if (ec) path = file;

  // Whoever can change the file runs code inside the daemon. Checked at
  // every load, a reload that shares the open file included: a loaded file
  // changed in place changes the running code.
  if (std::string refusal = TrustRefusal(path, TrustedUse::kPlugin); !refusal.empty()) {
    throw PluginError(refusal);
  }

  OpenPlugins& open_plugins = Registry();
  MutexLock lock(open_plugins.mu);
  auto& registry = open_plugins.by_path;
  std::erase_if(registry, [](const auto& entry) { return entry.second.expired(); });
  if (auto it = registry.find(path); it != registry.end()) {
    if (auto open = it->second.lock()) return open;
  }

  dlerror();  // clear
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* text = dlerror();
    std::string_view reason = text ? text : "unknown error";
    if (reason.starts_with(path + ": ")) reason.remove_prefix(path.size() + 2);
    throw PluginError(fmt::format("plugin {}: cannot load: {}", path, OneLine(reason)));
  }
  auto refuse = [&](const std::string& what) {
    dlclose(handle);
    return PluginError(fmt::format("plugin {}: {}", path, what));
  };
  void* symbol = dlsym(handle, AKADZED_PLUGIN_ENTRY_SYMBOL);
  if (symbol == nullptr) {
    throw refuse("no " AKADZED_PLUGIN_ENTRY_SYMBOL " symbol (is it an akadzed plugin? is the "
                 "symbol exported with AKADZED_PLUGIN_EXPORT?)");
  }
  const akadzed_plugin* api = reinterpret_cast<akadzed_plugin_entry_fn>(symbol)();
  if (std::string problem = CheckAbi(api); !problem.empty()) throw refuse(problem);

  auto plugin = std::make_shared<LoadedPlugin>(path, handle, api);
  registry[path] = plugin;
  return plugin;
}

// A new instance of `plugin` made by its init(config_json); `what` names its
// use in the error ("task X", "hook Y"). Throws PluginError.
void* InitPluginInstance(const LoadedPlugin& plugin, const std::string& config_json,
                         const std::string& what) {
  char error[1024] = {};
  void* instance = nullptr;
  int rc = plugin.api().init(config_json.c_str(), &instance, error, sizeof error);
  if (rc != 0) {
    error[sizeof error - 1] = '\0';
    std::string text = OneLine(error);
    if (text.empty()) text = "no error text";
    throw PluginError(fmt::format("plugin {}: init failed for {} (code {}): {}", plugin.path(),
                                  what, rc, text));
  }
  spdlog::debug("plugin use={} | loaded {} from {}", LogValue(what), plugin.label(), plugin.path());
  return instance;
}

void VerifyPlugin(const PluginHandlerConfig& config, PluginUse use) {
  std::shared_ptr<LoadedPlugin> plugin = OpenPlugin(config.path);
  const akadzed_plugin& api = plugin->api();
  if (use == PluginUse::kHandler && api.handle == nullptr) {
    throw PluginError(fmt::format("plugin {}: has no handle function, so it cannot run jobs "
                                  "(a hook-only plugin belongs under hooks:)", plugin->path()));
  }
  if (use == PluginUse::kHook &&
      (!AKADZED_HAS_MEMBER(&api, akadzed_plugin, on_transition) || api.on_transition == nullptr)) {
    throw PluginError(fmt::format("plugin {}: has no on_transition function, so it cannot be a "
                                  "hook", plugin->path()));
  }
}

std::vector<std::string> PluginSearchPath() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("AKADZED_PLUGIN_PATH")) {
    std::string_view rest = env;
    while (!rest.empty()) {
      std::size_t colon = rest.find(':');
      std::string_view entry = rest.substr(0, colon);
      if (!entry.empty()) dirs.emplace_back(entry);
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::filesystem::path dir = exe.parent_path();
    dirs.push_back((dir / "plugins").lexically_normal().string());
    dirs.push_back((dir / ".." / "lib" / "akadzed" / "plugins").lexically_normal().string());
  }
  return dirs;
}

}  // namespace akadzed
