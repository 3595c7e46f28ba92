# What `cmake --install` puts beside the binary and the libraries (the
# systemd units, the man pages, the example config), and the Debian package
# CPack builds from the same install (`cmake --build B --target package`;
# scripts/package configures B for /usr). Package dependencies come from the
# libraries the installed files link (dpkg-shlibdeps), plus adduser for the
# maintainer scripts in deploy/debian.

set(ERRAND_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
    "where the systemd units are installed (relative: under the prefix)")

# The units name /usr/bin/errand and /etc/errand; an install elsewhere
# gets its own paths.
foreach(unit errand.service errand-worker@.service)
  file(READ ${CMAKE_SOURCE_DIR}/deploy/systemd/${unit} text)
  string(REPLACE "/usr/bin/errand" "${CMAKE_INSTALL_FULL_BINDIR}/errand" text "${text}")
  string(REPLACE "/etc/errand/" "${CMAKE_INSTALL_FULL_SYSCONFDIR}/errand/" text "${text}")
  file(WRITE ${CMAKE_BINARY_DIR}/systemd/${unit} "${text}")
  install(FILES ${CMAKE_BINARY_DIR}/systemd/${unit} DESTINATION ${ERRAND_SYSTEMD_UNITDIR})
endforeach()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${CMAKE_SOURCE_DIR}/deploy/systemd/errand.service
             ${CMAKE_SOURCE_DIR}/deploy/systemd/errand-worker@.service)

install(FILES README.md docs/operations.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME errand)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "errand maintainers <errand@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "reliable background-job server, C client library and CLI")
set(CPACK_PACKAGE_DESCRIPTION
    "errand keeps every acknowledged job on disk until it is completed, dead or cancelled;\n"
    "workers lease jobs over HTTP/JSON. One binary with an embedded SQLite store or\n"
    "PostgreSQL for several servers, liberrand and liberrand-pg, and systemd units.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_SOURCE_DIR}/deploy/debian/postinst ${CMAKE_SOURCE_DIR}/deploy/debian/prerm
    ${CMAKE_SOURCE_DIR}/deploy/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
include(CPack)
