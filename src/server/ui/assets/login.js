// SPDX-License-Identifier: MIT
// The login page: shows why the last attempt failed. The form itself posts
// without script.
'use strict';
document.addEventListener('DOMContentLoaded', function () {
  if (new URLSearchParams(location.search).get('failed')) {
    document.getElementById('login-failed').hidden = false;
  }
  document.getElementById('token').focus();
});
