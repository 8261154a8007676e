# Installs the files whose contents or place depend on the install prefix:
# the systemd unit (it names the binary and /etc/akadzed) and the example
# configuration in <sysconfdir>/akadzed. Run by `cmake --install` and by
# cpack through install(CODE) in packaging/CMakeLists.txt, because only then
# is the prefix known: cpack installs with prefix /usr whatever the build
# was configured with. Expects AKADZED_SOURCE_DIR, AKADZED_BINARY_DIR,
# AKADZED_BINDIR and AKADZED_DOCDIR (GNUInstallDirs values, relative or not).

string(REGEX REPLACE "/+$" "" prefix "${CMAKE_INSTALL_PREFIX}")
# GNUInstallDirs' rule for the system configuration directory.
if(prefix STREQUAL "" OR prefix STREQUAL "/usr")
  set(etc "/etc")
elseif(prefix MATCHES "^/opt/")
  set(etc "/etc${prefix}")
else()
  set(etc "${prefix}/etc")
endif()
foreach(dir BINDIR DOCDIR)
  if(IS_ABSOLUTE "${AKADZED_${dir}}")
    set(${dir} "${AKADZED_${dir}}")
  else()
    set(${dir} "${prefix}/${AKADZED_${dir}}")
  endif()
endforeach()

# The unit is written for /usr/bin/akadzed and /etc/akadzed, the Debian
# package's paths; another prefix gets its own paths in the copy.
file(READ "${AKADZED_SOURCE_DIR}/systemd/akadzed.service" unit)
string(REPLACE "/usr/bin/akadzed" "${BINDIR}/akadzed" unit "${unit}")
string(REPLACE "/etc/akadzed/" "${etc}/akadzed/" unit "${unit}")
string(REPLACE "/usr/share/doc/akadzed/" "${DOCDIR}/" unit "${unit}")
set(staged "${AKADZED_BINARY_DIR}/install-staging")
file(WRITE "${staged}/akadzed.service" "${unit}")
file(INSTALL "${staged}/akadzed.service" DESTINATION "${prefix}/lib/systemd/system"
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)

# The example configuration becomes the config the unit uses, with the
# handlers it refers to (config/handlers/). Installing straight onto a
# system (no DESTDIR) keeps a config that is already there; the package
# marks these files as conffiles and dpkg protects them.
set(config "${etc}/akadzed/akadzed.yaml")
if("$ENV{DESTDIR}" STREQUAL "" AND EXISTS "${config}")
  message(STATUS "Keeping the existing ${etc}/akadzed (the example is in ${DOCDIR}/examples)")
else()
  file(INSTALL "${AKADZED_SOURCE_DIR}/config/akadzed.example.yaml"
       DESTINATION "${etc}/akadzed" RENAME akadzed.yaml
       PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  file(GLOB handlers "${AKADZED_SOURCE_DIR}/config/handlers/*")
  file(INSTALL ${handlers} DESTINATION "${etc}/akadzed/handlers"
       PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                   WORLD_READ WORLD_EXECUTE)
endif()
